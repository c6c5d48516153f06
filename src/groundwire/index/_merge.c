/* Linear passes of index building and updating (see _merge.py, index/merge.py).
 *
 * gw_merge_rows: an index's CSR rows with some documents dropped and renumbered and
 * the rows renumbered (both maps ascending), merged with new postings sorted by (row,
 * doc): one pass over the old postings, field frequency bytes carried along.
 * gw_score_rows: every posting's BM25 score from its exact field frequencies, the
 * per-document length norms and the idf of its row's document frequency (counted here,
 * per row and field, and looked up in an idf table indexed by document frequency that
 * numpy computed with the builder's expression), with the very operations (and order of
 * operations) of the numpy builder (lexical_builder.rows_of), so the scores are equal
 * bit for bit: only +, *, / of doubles, which IEEE 754 rounds exactly the same way
 * (compiled as ISO C: no contraction into fused multiply-adds).
 * gw_delta_rows: a delta index's query rows (delta.py) in one pass: each row's live base
 * postings renumbered through the tombstone map, merged by document with the delta
 * segment's postings of the same row, frequency bytes carried along, then scored as
 * gw_score_rows scores them.
 *
 * No Python headers; loaded through ctypes. Arrays are C-contiguous, native order.
 */
#include <stdint.h>

#define GW_MERGE_ABI 3
#define GW_TF_OVERFLOW 255
/* Postings ahead whose per-document data (norms, tombstone map) is fetched early: sparse
 * rows read them at random, and a miss per posting would otherwise stall the divisions.
 * A hint only (no effect on results); compilers without the builtin skip it. */
#define GW_AHEAD 12
#if defined(__GNUC__) || defined(__clang__)
#define GW_PREFETCH(p) __builtin_prefetch(p)
#else
#define GW_PREFETCH(p) ((void)0)
#endif

int64_t gw_merge_abi_version(void) { return GW_MERGE_ABI; }

/* One field's frequency bytes: counts[p - start] for p in [start, start + len). */
typedef struct {
    const uint8_t *counts;
    int64_t start;
    int64_t len;
} gw_bytes;

static inline uint8_t byte_at(const gw_bytes *f, int64_t p) {
    int64_t j = p - f->start;
    return (j >= 0 && j < f->len) ? f->counts[j] : 0;
}

/* Returns the number of postings written, or -1 when the output would overflow
 * ``capacity`` or a map points outside its range (damaged input). ``ovf_at[f]``
 * (``n_ovf[f]`` ascending old positions) get their new positions in ``ovf_out[f]``
 * (-1: dropped); each new posting's position goes to ``new_out``. */
int64_t gw_merge_rows(
    int64_t n_old_rows, const int64_t *old_indptr, const int32_t *old_docs,
    const int64_t *row_map, const int32_t *doc_map, int64_t n_old_docs,
    int64_t n_fields, const gw_bytes *old_counts,
    const int64_t *const *ovf_at, const int64_t *n_ovf, int64_t *const *ovf_out,
    int64_t n_new, const int64_t *new_rows, const int32_t *new_docs,
    const int64_t *const *new_tf, int64_t *new_out,
    int64_t n_rows, int64_t capacity, int64_t *out_indptr, int32_t *out_docs,
    uint8_t *const *out_counts)
{
    int64_t out = 0, j = 0, f;
    int64_t cursor[64];
    const uint8_t *in_f[64];   /* per row: the field's bytes at the row's first posting */
    uint8_t *out_f[64];
    int64_t active[64], n_active;
    if (n_fields > 64) return -1;
    for (f = 0; f < n_fields; f++) cursor[f] = 0;
    for (int64_t r = 0; r <= n_rows; r++) out_indptr[r] = 0;
#define EMIT_NEW()                                                                  \
    do {                                                                            \
        if (out >= capacity || new_rows[j] < 0 || new_rows[j] >= n_rows) return -1; \
        out_docs[out] = new_docs[j];                                                \
        for (f = 0; f < n_fields; f++) {                                            \
            int64_t t = new_tf[f][j];                                               \
            if (t) out_counts[f][out] = t >= GW_TF_OVERFLOW ? GW_TF_OVERFLOW : (uint8_t)t; \
        }                                                                           \
        out_indptr[new_rows[j] + 1]++;                                              \
        new_out[j++] = out++;                                                       \
    } while (0)
    for (int64_t r = 0; r < n_old_rows; r++) {
        int64_t nr = row_map[r], lo = old_indptr[r], hi = old_indptr[r + 1];
        if (nr < 0 || nr >= n_rows || lo < 0 || hi < lo || hi > old_indptr[n_old_rows]) return -1;
        while (j < n_new && new_rows[j] < nr) EMIT_NEW();
        if (lo == hi) continue;
        /* Field ranges hold whole rows: a field has bytes for all of a row or none. */
        n_active = 0;
        for (f = 0; f < n_fields; f++) {
            const gw_bytes *c = &old_counts[f];
            if (lo >= c->start && hi <= c->start + c->len) {
                active[n_active++] = f;
            } else if (hi > c->start && lo < c->start + c->len) {
                return -1;
            }
        }
        for (int64_t a = 0; a < n_active; a++) {
            f = active[a];
            in_f[a] = old_counts[f].counts - old_counts[f].start;
            out_f[a] = out_counts[f];
        }
        int has_new = j < n_new && new_rows[j] == nr;
        int has_ovf = 0;
        for (f = 0; f < n_fields; f++)
            if (cursor[f] < n_ovf[f] && ovf_at[f][cursor[f]] < hi) has_ovf = 1;
        if (!has_new && !has_ovf) {  /* the common case: a renumbering copy */
            int64_t before = out;
            for (int64_t p = lo; p < hi; p++) {
                int32_t od = old_docs[p];
                if (od < 0 || od >= n_old_docs) return -1;
                int32_t d = doc_map[od];
                if (d < 0) continue;
                if (out >= capacity) return -1;
                out_docs[out] = d;
                for (int64_t a = 0; a < n_active; a++) {
                    uint8_t c = in_f[a][p];
                    if (c) out_f[a][out] = c;
                }
                out++;
            }
            out_indptr[nr + 1] += out - before;
            continue;
        }
        for (int64_t p = lo; p < hi; p++) {
            int32_t od = old_docs[p];
            if (od < 0 || od >= n_old_docs) return -1;
            int32_t d = doc_map[od];
            if (d >= 0)
                while (j < n_new && new_rows[j] == nr && new_docs[j] < d) EMIT_NEW();
            if (has_ovf) {
                for (f = 0; f < n_fields; f++) {  /* overflowing frequencies at or before p */
                    while (cursor[f] < n_ovf[f] && ovf_at[f][cursor[f]] <= p) {
                        ovf_out[f][cursor[f]] = (ovf_at[f][cursor[f]] == p && d >= 0) ? out : -1;
                        cursor[f]++;
                    }
                }
            }
            if (d < 0) continue;
            if (out >= capacity) return -1;
            out_docs[out] = d;
            for (int64_t a = 0; a < n_active; a++) {
                uint8_t c = in_f[a][p];
                if (c) out_f[a][out] = c;
            }
            out_indptr[nr + 1]++;
            out++;
        }
        while (j < n_new && new_rows[j] == nr) EMIT_NEW();
    }
    while (j < n_new) EMIT_NEW();
#undef EMIT_NEW
    for (f = 0; f < n_fields; f++)
        for (; cursor[f] < n_ovf[f]; cursor[f]++) ovf_out[f][cursor[f]] = -1;
    for (int64_t r = 0; r < n_rows; r++) out_indptr[r + 1] += out_indptr[r];
    return out;
}

/* The first of ``n`` ascending positions ``at`` that is >= ``p``. */
static int64_t first_at_or_after(const int64_t *at, int64_t n, int64_t p) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (at[mid] < p) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* Scores postings lo..hi of one row (see gw_score_rows); ``cursor[f]`` is at or before
 * the field's first overflow entry in the row and is left after its last. Returns 0, or
 * -1 for a document out of range, a field range cutting the row or a document frequency
 * outside its idf table. */
static int64_t score_row(
    int64_t lo, int64_t hi, const int32_t *docs, int64_t n_docs,
    int64_t n_fields, const gw_bytes *counts,
    const int64_t *const *ovf_at, const int64_t *const *ovf_tf, const int64_t *n_ovf,
    int64_t *cursor, const double *weights, const double *knorms,
    const double *const *idf, const int64_t *idf_len, int64_t mode, double k1,
    double *scores)
{
    int64_t active[64], n_active = 0;
    const uint8_t *in_f[64];
    double wi[64];
    const double k1p = k1 + 1;
    double row_idf = 0.0;
    if (lo == hi) return 0;
    if (mode == 1) {  /* bm25f: the row's documents are its document frequency */
        if (hi - lo >= idf_len[0]) return -1;
        row_idf = idf[0][hi - lo];
    }
    for (int64_t f = 0; f < n_fields; f++) {
        const gw_bytes *c = &counts[f];
        if (lo >= c->start && hi <= c->start + c->len) {
            if (weights[f] == 0.0) continue;
            in_f[n_active] = c->counts - c->start;
            if (mode == 1) {
                wi[n_active] = weights[f];
            } else {
                int64_t df = 0;
                for (int64_t p = lo; p < hi; p++) df += in_f[n_active][p] != 0;
                if (df >= idf_len[f]) return -1;
                /* numpy: weights[f] * field_idf[terms] * tf ...: the product is formed first */
                wi[n_active] = weights[f] * idf[f][df];
            }
            active[n_active++] = f;
        } else if (hi > c->start && lo < c->start + c->len) {
            return -1;
        }
    }
    for (int64_t p = lo; p < hi; p++) {
        int64_t d = docs[p];
        double summed = 0.0;
        int any = 0;
        if (d < 0 || d >= n_docs) return -1;
        if (p + GW_AHEAD < hi) {
            int64_t ahead = docs[p + GW_AHEAD];
            if (ahead >= 0 && ahead < n_docs) GW_PREFETCH(knorms + ahead * n_fields);
        }
        const double *kn = knorms + d * n_fields;
        for (int64_t a = 0; a < n_active; a++) {
            uint8_t c = in_f[a][p];
            if (!c) continue;
            int64_t f = active[a], tf = c;
            if (c == GW_TF_OVERFLOW) {
                while (cursor[f] < n_ovf[f] && ovf_at[f][cursor[f]] < p) cursor[f]++;
                if (cursor[f] < n_ovf[f] && ovf_at[f][cursor[f]] == p) tf = ovf_tf[f][cursor[f]];
            }
            double tff = (double)tf, v;
            if (mode == 1) {
                v = wi[a] * tff / kn[f];
            } else {
                v = wi[a] * tff * k1p / (tff + kn[f]);
            }
            summed = any ? summed + v : v;
            any = 1;
        }
        scores[p] = mode == 1 ? row_idf * summed * k1p / (summed + k1) : summed;
    }
    return 0;
}

/* mode 0: "fields" (idf[f][df] per field f, df the row's postings holding the term in
 * f), mode 1: "bm25f" (idf[0][df], df the row's postings). ``idf_len[f]`` entries each.
 * knorms: n_docs x n_fields, the length norm (bm25f) or k1 times it ("fields"), as numpy
 * computes them. Fields of weight 0 are skipped, as the builder skips them.
 * Scores rows r_lo..r_hi only (threads share the rows). Returns 0, or -1 for a document
 * out of range, a field range cutting a row or a document frequency outside its table. */
int64_t gw_score_rows(
    int64_t n_rows, int64_t r_lo, int64_t r_hi, const int64_t *indptr, const int32_t *docs,
    int64_t n_docs, int64_t n_fields, const gw_bytes *counts,
    const int64_t *const *ovf_at, const int64_t *const *ovf_tf, const int64_t *n_ovf,
    const double *weights, const double *knorms,
    const double *const *idf, const int64_t *idf_len,
    int64_t mode, double k1, double *scores)
{
    int64_t cursor[64];
    if (n_fields > 64) return -1;
    if (r_lo < 0 || r_hi > n_rows || r_lo > r_hi) return -1;
    for (int64_t f = 0; f < n_fields; f++)  /* the first overflow at or after the range */
        cursor[f] = first_at_or_after(ovf_at[f], n_ovf[f], indptr[r_lo]);
    for (int64_t r = r_lo; r < r_hi; r++) {
        if (indptr[r] > indptr[r + 1]) return -1;
        if (score_row(indptr[r], indptr[r + 1], docs, n_docs, n_fields, counts, ovf_at, ovf_tf,
                      n_ovf, cursor, weights, knorms, idf, idf_len, mode, k1, scores))
            return -1;
    }
    return 0;
}

/* One segment of a delta index: its postings' documents and per-field frequencies. */
typedef struct {
    const int32_t *docs;
    int64_t n_postings;
    const gw_bytes *counts;          /* n_fields */
    const int64_t *const *ovf_at;    /* n_fields: overflow positions, ascending */
    const int64_t *const *ovf_tf;    /* n_fields: their exact frequencies */
    const int64_t *n_ovf;            /* n_fields */
} gw_segment;

/* One segment's postings lo..hi of a row: which fields have bytes there, and each field's
 * first overflow entry in it. Returns 0, or -1 when the span or a field range is bad. */
static int64_t open_span(const gw_segment *s, int64_t n_fields, int64_t lo, int64_t hi,
                         const uint8_t **bytes, int64_t *cursor)
{
    if (lo < 0 || hi < lo || hi > s->n_postings) return -1;
    for (int64_t f = 0; f < n_fields; f++) {
        const gw_bytes *c = &s->counts[f];
        bytes[f] = 0;
        cursor[f] = 0;
        if (lo == hi) continue;
        if (lo >= c->start && hi <= c->start + c->len) {
            bytes[f] = c->counts - c->start;
            cursor[f] = first_at_or_after(s->ovf_at[f], s->n_ovf[f], lo);
        } else if (hi > c->start && lo < c->start + c->len) {
            return -1;
        }
    }
    return 0;
}

/* Copies posting p of segment s into output posting out: its frequency bytes and, for an
 * overflowing byte, its exact frequency (255 when the segment lacks it: damaged, as the
 * numpy path leaves it). Returns 0, or -1 when an overflow output is full. */
static int64_t copy_posting(const gw_segment *s, int64_t n_fields, const uint8_t *const *bytes,
                            int64_t *cursor, int64_t p, int64_t out,
                            uint8_t *const *out_counts, int64_t ovf_capacity,
                            int64_t *const *out_ovf_at, int64_t *const *out_ovf_tf,
                            int64_t *out_n_ovf)
{
    for (int64_t f = 0; f < n_fields; f++) {
        uint8_t c = bytes[f] ? bytes[f][p] : 0;
        out_counts[f][out] = c;
        if (c != GW_TF_OVERFLOW) continue;
        int64_t tf = GW_TF_OVERFLOW;
        while (cursor[f] < s->n_ovf[f] && s->ovf_at[f][cursor[f]] < p) cursor[f]++;
        if (cursor[f] < s->n_ovf[f] && s->ovf_at[f][cursor[f]] == p) tf = s->ovf_tf[f][cursor[f]];
        if (out_n_ovf[f] >= ovf_capacity) return -1;
        out_ovf_at[f][out_n_ovf[f]] = out;
        out_ovf_tf[f][out_n_ovf[f]++] = tf;
    }
    return 0;
}

/* The query rows of a delta index, gathered and scored: row r is the live postings of
 * base postings spans[4r]..spans[4r+1] (documents renumbered by base_to_now, -1: gone)
 * and delta postings spans[4r+2]..spans[4r+3] (current numbering), merged by document
 * (both ascending, disjoint). Writes out_indptr (n_rows + 1), out_docs, every field's
 * frequency byte per posting (out_counts), the overflowing frequencies (out_ovf_at /
 * out_ovf_tf, out_n_ovf per field), and each posting's score for the current norms and
 * idf tables (as gw_score_rows). Returns the postings written, -1 for damaged input (a
 * document or span out of range, a document in both segments), -2 when ``capacity`` or
 * ``ovf_capacity`` is too small. */
int64_t gw_delta_rows(
    const gw_segment *base, const int32_t *base_to_now, int64_t n_base_docs,
    const gw_segment *delta, int64_t n_docs, int64_t n_fields,
    int64_t n_rows, const int64_t *spans,
    const double *weights, const double *knorms,
    const double *const *idf, const int64_t *idf_len, int64_t mode, double k1,
    int64_t capacity, int64_t *out_indptr, int32_t *out_docs, uint8_t *const *out_counts,
    int64_t ovf_capacity, int64_t *const *out_ovf_at, int64_t *const *out_ovf_tf,
    int64_t *out_n_ovf, double *out_scores)
{
    const uint8_t *b_bytes[64], *d_bytes[64];
    int64_t b_cur[64], d_cur[64], s_cur[64];
    gw_bytes written[64];
    int64_t out = 0;
    if (n_fields > 64) return -1;
    for (int64_t f = 0; f < n_fields; f++) {
        out_n_ovf[f] = 0;
        written[f].counts = out_counts[f];
        written[f].start = 0;
        written[f].len = capacity;
    }
    out_indptr[0] = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t i = spans[4 * r], i_hi = spans[4 * r + 1];
        int64_t j = spans[4 * r + 2], j_hi = spans[4 * r + 3];
        int64_t row_lo = out;
        if (open_span(base, n_fields, i, i_hi, b_bytes, b_cur)) return -1;
        if (open_span(delta, n_fields, j, j_hi, d_bytes, d_cur)) return -1;
        for (int64_t f = 0; f < n_fields; f++) s_cur[f] = out_n_ovf[f];
        int64_t now = -1, next = -1;  /* the current number of base posting i, delta posting j */
        while (1) {
            while (now < 0 && i < i_hi) {
                if (i + GW_AHEAD < i_hi) {
                    int32_t ahead = base->docs[i + GW_AHEAD];
                    if (ahead >= 0 && ahead < n_base_docs) GW_PREFETCH(base_to_now + ahead);
                }
                int32_t old = base->docs[i];
                if (old < 0 || old >= n_base_docs) return -1;
                now = base_to_now[old];
                if (now >= n_docs) return -1;
                if (now < 0) i++;
            }
            if (next < 0 && j < j_hi) {
                next = delta->docs[j];
                if (next < 0 || next >= n_docs) return -1;
            }
            if (now < 0 && next < 0) break;
            if (out >= capacity) return -2;
            int64_t status;
            if (next < 0 || (now >= 0 && now < next)) {
                out_docs[out] = (int32_t)now;
                status = copy_posting(base, n_fields, b_bytes, b_cur, i, out, out_counts,
                                      ovf_capacity, out_ovf_at, out_ovf_tf, out_n_ovf);
                i++;
                now = -1;
            } else {
                if (now == next) return -1;  /* a document in both segments */
                out_docs[out] = (int32_t)next;
                status = copy_posting(delta, n_fields, d_bytes, d_cur, j, out, out_counts,
                                      ovf_capacity, out_ovf_at, out_ovf_tf, out_n_ovf);
                j++;
                next = -1;
            }
            if (status) return -2;
            out++;
        }
        out_indptr[r + 1] = out;
        if (score_row(row_lo, out, out_docs, n_docs, n_fields, written,
                      (const int64_t *const *)out_ovf_at, (const int64_t *const *)out_ovf_tf,
                      out_n_ovf, s_cur, weights, knorms, idf, idf_len, mode, k1, out_scores))
            return -1;
    }
    return out;
}
