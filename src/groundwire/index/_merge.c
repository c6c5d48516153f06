/* Linear passes of index building and updating (see _merge.py, index/merge.py).
 *
 * gw_merge_rows: an index's CSR rows with some documents dropped and renumbered and
 * the rows renumbered (both maps ascending), merged with new postings sorted by (row,
 * doc): one pass over the old postings, field frequency bytes carried along.
 * gw_row_df: per field, the postings of each row whose frequency byte is non-zero.
 * gw_score_rows: every posting's BM25 score from its exact field frequencies, the
 * per-document length norms and the per-row idf, with the very operations (and order of
 * operations) of the numpy builder (lexical_builder.rows_of), so the scores are equal
 * bit for bit: only +, *, / of doubles, which IEEE 754 rounds exactly the same way
 * (compiled as ISO C: no contraction into fused multiply-adds).
 *
 * No Python headers; loaded through ctypes. Arrays are C-contiguous, native order.
 */
#include <stdint.h>

#define GW_MERGE_ABI 2
#define GW_TF_OVERFLOW 255

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

void gw_row_df(int64_t n_rows, const int64_t *indptr, int64_t n_fields,
               const gw_bytes *counts, int64_t *df /* n_fields x n_rows */)
{
    for (int64_t f = 0; f < n_fields; f++) {
        const gw_bytes *c = &counts[f];
        for (int64_t r = 0; r < n_rows; r++) {
            int64_t lo = indptr[r], hi = indptr[r + 1], n = 0;
            if (lo < c->start) lo = c->start;
            if (hi > c->start + c->len) hi = c->start + c->len;
            for (int64_t p = lo; p < hi; p++) n += c->counts[p - c->start] != 0;
            df[f * n_rows + r] = n;
        }
    }
}

/* mode 0: "fields" (idf is n_fields x n_rows), mode 1: "bm25f" (idf per row).
 * knorms: n_docs x n_fields, the length norm (bm25f) or k1 times it ("fields"), as numpy
 * computes them. Fields of weight 0 are skipped, as the builder skips them.
 * Scores rows r_lo..r_hi only (threads share the rows). Returns 0, or -1 for a document
 * out of range or a field range cutting a row. */
int64_t gw_score_rows(
    int64_t n_rows, int64_t r_lo, int64_t r_hi, const int64_t *indptr, const int32_t *docs, int64_t n_docs,
    int64_t n_fields, const gw_bytes *counts,
    const int64_t *const *ovf_at, const int64_t *const *ovf_tf, const int64_t *n_ovf,
    const double *weights, const double *knorms, const double *idf,
    int64_t mode, double k1, double *scores)
{
    int64_t cursor[64], active[64], n_active;
    const uint8_t *in_f[64];
    double wi[64];
    const double k1p = k1 + 1;
    if (n_fields > 64) return -1;
    if (r_lo < 0 || r_hi > n_rows || r_lo > r_hi) return -1;
    for (int64_t f = 0; f < n_fields; f++) {  /* the first overflow at or after the range */
        cursor[f] = 0;
        while (cursor[f] < n_ovf[f] && ovf_at[f][cursor[f]] < indptr[r_lo]) cursor[f]++;
    }
    for (int64_t r = r_lo; r < r_hi; r++) {
        int64_t lo = indptr[r], hi = indptr[r + 1];
        if (lo == hi) continue;
        n_active = 0;
        for (int64_t f = 0; f < n_fields; f++) {
            const gw_bytes *c = &counts[f];
            if (lo >= c->start && hi <= c->start + c->len) {
                if (weights[f] == 0.0) continue;
                in_f[n_active] = c->counts - c->start;
                /* numpy: weights[f] * field_idf[terms] * tf ...: the product is formed first */
                wi[n_active] = mode == 1 ? weights[f] : weights[f] * idf[f * n_rows + r];
                active[n_active++] = f;
            } else if (hi > c->start && lo < c->start + c->len) {
                return -1;
            }
        }
        const double row_idf = mode == 1 ? idf[r] : 0.0;
        for (int64_t p = lo; p < hi; p++) {
            int64_t d = docs[p];
            double summed = 0.0;
            int any = 0;
            if (d < 0 || d >= n_docs) return -1;
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
    }
    return 0;
}
