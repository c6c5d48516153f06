/* Query kernel for groundwire's precomputed BM25 rows (loaded through ctypes).
 *
 * Plain C99 without Python or numpy headers, so one shared library serves every Python
 * version. The numpy path in groundwire.index.lexical gives identical results; this only
 * removes the per-call overhead of a dozen numpy operations per query.
 *
 * Bitwise identity with numpy: np.bincount(docs, weights) starts each document at 0.0 and
 * adds its weights in array order, one double addition at a time. The kernel adds in the
 * same order (rows in the order given, postings in row order) with plain double additions;
 * C99 does not let the compiler reassociate them (no -ffast-math), so the sums are equal.
 *
 * Rows hold int64 documents (a freshly built index, np.intp) or int32 documents (an index
 * loaded from a snapshot, which stores them as int32): gw_query.wide says which.
 *
 * Entry points: gw_query_topk / gw_query_score_of take one gw_query (all arguments in a
 * struct: a one-pointer ctypes call costs ~0.4 us where twelve arguments cost ~2 us) and
 * check bounds and documents; gw_score_topk / gw_score_of are the plain-argument forms for
 * int64 documents, which trust their input. gw_query_rows_topk / gw_query_rows_score_of
 * take rows as term ids and read their bounds from the index's offsets; gw_query_codes_topk
 * takes a query's words as codes (term id, stop word, unknown) and also finds the indexed
 * adjacent term pairs among them (gw_resolve), so a query goes from words to results in
 * one call; gw_query_resolve only finds the rows.
 *
 * A query runs in three steps:
 *   1. accumulate: acc[doc] += score over every posting, in row order;
 *   2. collect candidates (positive, not excluded, not below a floor) into `touched`,
 *      either by scanning acc densely (when the rows hold at least a quarter as many
 *      postings as there are documents: a linear scan, mostly branch-free) or, for sparse
 *      queries over many documents, through the list of touched documents kept during
 *      step 1 (`seen` marks them). The floor starts at the k-th best sum among the
 *      documents of one of the rarest rows (gw_probe); whenever the candidates reach
 *      k + max(k, GW_SPARE_MIN), a selection keeps the k best and raises the floor to the
 *      k-th best;
 *   3. select the k best candidates and sort them (score descending, document ascending).
 * The scratch is zeroed on the way out. Selection and sorting compare (score, document)
 * pairs, a strict total order, so the result does not depend on the candidates' order.
 */
#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Extended-precision intermediates (x87) would round differently from numpy's doubles:
   refuse to build there, and groundwire falls back to numpy. */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "the groundwire kernel needs double arithmetic without extended precision"
#endif

#if defined(_WIN32)
#define GW_EXPORT __declspec(dllexport)
#else
#define GW_EXPORT __attribute__((visibility("default")))
#endif

/* Bumped whenever a signature or a semantic changes; the loader refuses a stale library. */
#define GW_ABI_VERSION 3

/* Scan acc densely when n_docs <= GW_DENSE_RATIO * postings (see step 2 above). */
#define GW_DENSE_RATIO 4
/* Candidates kept before a selection shrinks them back to k: k + max(k, GW_SPARE_MIN).
   Early selections raise the floor sooner; too frequent ones cost more than they prune
   (SciFact, k = 10/100/1000: 64 is as good as 32 or 128, better than 16 or 3k + 256). */
#ifndef GW_SPARE_MIN
#define GW_SPARE_MIN 64
#endif
/* A probe row (see gw_probe) is used when k <= GW_PROBE_MAX_K and the row holds at most
   GW_PROBE_FACTOR * k + GW_PROBE_MIN documents: beyond, its heap costs more than the bound
   saves (measured on SciFact: k = 10 and 100 gain 10-30%, k = 1000 loses 15%). */
#ifndef GW_PROBE_MAX_K
#define GW_PROBE_MAX_K 256
#endif
#define GW_PROBE2_MAX_K 32
#define GW_PROBE_FACTOR 16
#define GW_PROBE_MIN 256
/* Ranges this short are sorted by insertion. */
#define GW_SMALL 16
/* Quickselect rounds and quicksort depth before falling back to heaps (bounding the worst
   case); overridable to exercise the fallbacks in tests. */
#ifndef GW_SELECT_ROUNDS
#define GW_SELECT_ROUNDS 64
#endif
#ifndef GW_SORT_DEPTH
#define GW_SORT_DEPTH 128
#endif

GW_EXPORT int64_t gw_abi_version(void) { return GW_ABI_VERSION; }

/* Document number j of a row array of int64 (wide) or int32 documents. `wide` is constant
   in every loop, so the compiler unswitches the loops into one copy per width. */
static inline int64_t gw_doc(const void *docs, int wide, int64_t j) {
    return wide ? ((const int64_t *)docs)[j] : (int64_t)((const int32_t *)docs)[j];
}

/* Whether (score a, doc da) ranks above (score b, doc db): higher score, or equal score and
   lower document number. Documents are distinct, so this is a strict total order. */
static inline int gw_better(double a, int64_t da, double b, int64_t db) {
    return a > b || (a == b && da < db);
}

/* Whether any of the 8 doubles at p reaches the floor (exceeds it when strict): a
   branch-free filter before the exact test of each. With GCC or Clang, two-lane vectors
   (SSE2 on x86-64, NEON on arm64) make it ~3x faster than scalar comparisons, which
   other compilers get. A NaN never reaches (nor would it pass the exact test). */
static inline int gw_block_reaches(const double *p, double floor, int strict) {
#if defined(__GNUC__)
    typedef double gw_v2d __attribute__((vector_size(16)));
    gw_v2d f = {floor, floor}, x0, x1, x2, x3;
    memcpy(&x0, p, sizeof x0);
    memcpy(&x1, p + 2, sizeof x1);
    memcpy(&x2, p + 4, sizeof x2);
    memcpy(&x3, p + 6, sizeof x3);
    if (strict) {
        __typeof__(x0 > f) m = (x0 > f) | (x1 > f) | (x2 > f) | (x3 > f);
        return (m[0] | m[1]) != 0;
    }
    __typeof__(x0 >= f) m = (x0 >= f) | (x1 >= f) | (x2 >= f) | (x3 >= f);
    return (m[0] | m[1]) != 0;
#else
    int any = 0;
    for (int i = 0; i < 8; i++) any |= strict ? p[i] > floor : p[i] >= floor;
    return any;
#endif
}

/* -- selection over candidate documents whose scores are read from acc ------------------ */

static inline int gw_cand_better(const double *acc, int64_t x, int64_t y) {
    return gw_better(acc[x], x, acc[y], y);
}

static inline void gw_swap(int64_t *c, int64_t i, int64_t j) {
    int64_t t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/* Sift the item at i down a heap of n items whose root is the worst (heap select). */
static void gw_cand_sift(const double *acc, int64_t *c, int64_t n, int64_t i) {
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= n) return;
        if (child + 1 < n && gw_cand_better(acc, c[child], c[child + 1])) child++;
        if (!gw_cand_better(acc, c[i], c[child])) return;
        gw_swap(c, i, child);
        i = child;
    }
}

/* Fallback when quickselect degrades: a heap of the k best (worst at the root). */
static void gw_heap_select(const double *acc, int64_t *c, int64_t n, int64_t k) {
    for (int64_t i = k / 2; i-- > 0;) gw_cand_sift(acc, c, k, i);
    for (int64_t i = k; i < n; i++) {
        if (gw_cand_better(acc, c[i], c[0])) {
            gw_swap(c, 0, i);
            gw_cand_sift(acc, c, k, 0);
        }
    }
}

/* Rearrange c[0..n) so that c[0..k) holds the k best (in no particular order), 0 < k < n.
   Quickselect with a median-of-three pivot, falling back to a heap after too many rounds. */
static void gw_select(const double *acc, int64_t *c, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1, budget = GW_SELECT_ROUNDS;
    while (hi > lo) {
        if (--budget == 0) {
            gw_heap_select(acc, c + lo, hi - lo + 1, k - lo);
            return;
        }
        int64_t mid = lo + (hi - lo) / 2;
        /* Order c[lo], c[mid], c[hi] best first; the median becomes the pivot. */
        if (gw_cand_better(acc, c[mid], c[lo])) gw_swap(c, mid, lo);
        if (gw_cand_better(acc, c[hi], c[lo])) gw_swap(c, hi, lo);
        if (gw_cand_better(acc, c[hi], c[mid])) gw_swap(c, hi, mid);
        int64_t pivot = c[mid];
        double ps = acc[pivot];
        int64_t i = lo, j = hi;
        while (i <= j) { /* Hoare partition: better than the pivot to the left */
            while (gw_better(acc[c[i]], c[i], ps, pivot)) i++;
            while (gw_better(ps, pivot, acc[c[j]], c[j])) j--;
            if (i <= j) {
                gw_swap(c, i, j);
                i++;
                j--;
            }
        }
        /* Now c[lo..j] are at least as good as the pivot, c[i..hi] at most, j < i. */
        if (k - 1 <= j) {
            hi = j;
        } else if (k - 1 >= i) {
            lo = i;
        } else {
            return; /* position k-1 holds the pivot, between the two sides */
        }
    }
}

/* -- sorting the k results (documents with their scores) -------------------------------- */

static inline void gw_pair_swap(int64_t *d, double *s, int64_t i, int64_t j) {
    int64_t td = d[i];
    double ts = s[i];
    d[i] = d[j];
    s[i] = s[j];
    d[j] = td;
    s[j] = ts;
}

static void gw_insertion_sort(int64_t *d, double *s, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        int64_t doc = d[i];
        double score = s[i];
        int64_t j = i;
        while (j > 0 && gw_better(score, doc, s[j - 1], d[j - 1])) {
            d[j] = d[j - 1];
            s[j] = s[j - 1];
            j--;
        }
        d[j] = doc;
        s[j] = score;
    }
}

static void gw_pair_sift(int64_t *d, double *s, int64_t n, int64_t i) {
    for (;;) { /* a heap whose root is the worst, so the heap sort leaves the best first */
        int64_t child = 2 * i + 1;
        if (child >= n) return;
        if (child + 1 < n && gw_better(s[child], d[child], s[child + 1], d[child + 1])) child++;
        if (!gw_better(s[i], d[i], s[child], d[child])) return;
        gw_pair_swap(d, s, i, child);
        i = child;
    }
}

static void gw_heap_sort(int64_t *d, double *s, int64_t n) {
    for (int64_t i = n / 2; i-- > 0;) gw_pair_sift(d, s, n, i);
    for (int64_t end = n - 1; end > 0; end--) {
        gw_pair_swap(d, s, 0, end);
        gw_pair_sift(d, s, end, 0);
    }
}

/* Sort n results best first: quicksort, insertion sort for short ranges, heap sort when the
   recursion gets too deep. */
static void gw_sort(int64_t *d, double *s, int64_t n, int depth) {
    while (n > GW_SMALL) {
        if (depth-- == 0) {
            gw_heap_sort(d, s, n);
            return;
        }
        int64_t mid = n / 2, last = n - 1;
        if (gw_better(s[mid], d[mid], s[0], d[0])) gw_pair_swap(d, s, mid, 0);
        if (gw_better(s[last], d[last], s[0], d[0])) gw_pair_swap(d, s, last, 0);
        if (gw_better(s[last], d[last], s[mid], d[mid])) gw_pair_swap(d, s, last, mid);
        int64_t pd = d[mid];
        double ps = s[mid];
        int64_t i = 0, j = last;
        while (i <= j) {
            while (gw_better(s[i], d[i], ps, pd)) i++;
            while (gw_better(ps, pd, s[j], d[j])) j--;
            if (i <= j) {
                gw_pair_swap(d, s, i, j);
                i++;
                j--;
            }
        }
        /* Recurse into the smaller side, loop on the larger. */
        if (j + 1 < n - i) {
            gw_sort(d, s, j + 1, depth);
            d += i;
            s += i;
            n -= i;
        } else {
            gw_sort(d + i, s + i, n - i, depth);
            n = j + 1;
        }
    }
    gw_insertion_sort(d, s, n);
}

/* -- candidates -------------------------------------------------------------------------- */

/* Candidates are documents in c[0..count); a selection keeps the k best once count reaches
   limit, and `floor` becomes the k-th best score: a candidate below it cannot make the top k.
   A candidate equal to it might (a lower document number), so it is kept. */
typedef struct {
    int64_t *c;
    int64_t count, k, limit;
    double floor;
} gw_candidates;

/* Keep the k best candidates, raise the floor to the k-th best score; with zero_dropped,
   clear the acc of the dropped ones (nothing else would). */
static void gw_shrink(gw_candidates *cand, double *acc, int zero_dropped) {
    gw_select(acc, cand->c, cand->count, cand->k);
    double worst = acc[cand->c[0]];
    for (int64_t i = 1; i < cand->k; i++) {
        double s = acc[cand->c[i]];
        if (s < worst) worst = s;
    }
    if (zero_dropped) {
        for (int64_t i = cand->k; i < cand->count; i++) acc[cand->c[i]] = 0.0;
    }
    cand->floor = worst;
    cand->count = cand->k;
}

static inline int64_t gw_finish(gw_candidates *cand, const double *acc, int64_t *out_docs,
                                double *out_scores) {
    int64_t n = cand->count;
    if (n > cand->k) {
        gw_select(acc, cand->c, n, cand->k);
        n = cand->k;
    }
    for (int64_t i = 0; i < n; i++) {
        out_docs[i] = cand->c[i];
        out_scores[i] = acc[cand->c[i]];
    }
    gw_sort(out_docs, out_scores, n, GW_SORT_DEPTH);
    return n;
}

/* Min-heap of doubles (the k best probe scores so far, the k-th best at the root). */
static void gw_min_sift(double *h, int64_t n, int64_t i) {
    double v = h[i];
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && h[child + 1] < h[child]) child++;
        if (!(h[child] < v)) break;
        h[i] = h[child];
        i = child;
    }
    h[i] = v;
}

/* One query. Bounds are clamped to [0, n_postings) and documents outside [0, n_docs) make
   the query fail (-1) when n_postings / n_docs are >= 0; -1 means unknown (not checked;
   an unknown n_docs also rules out the dense scan). */
typedef struct {
    const int64_t *lo;       /* row starts, n_rows of them */
    const int64_t *hi;       /* row ends */
    int64_t n_rows;
    const void *docs;        /* int64 documents when wide != 0, else int32 */
    int64_t wide;
    const double *scores;
    int64_t n_postings;      /* length of docs and scores, or -1 */
    int64_t n_docs;          /* documents in the index, or -1 */
    double *acc;             /* scratch: n_docs doubles, zero on entry and exit */
    uint8_t *seen;           /* scratch: n_docs bytes, zero on entry and exit */
    int64_t *touched;        /* scratch: n_docs + n_docs / 8 + 1 entries (n_docs >= 0), or
                                the rows' distinct documents (n_docs = -1) */
    const uint8_t *excluded; /* NULL, or n_docs flags: documents to skip */
    int64_t k;
    int64_t *out_docs;       /* k documents, best first */
    double *out_scores;      /* their scores */
    /* Rows given by term id (gw_query_rows_*) or by query word codes (gw_query_codes_*),
       resolved against the index's CSR offsets and term pairs (see gw_resolve). */
    const int64_t *indptr;       /* n_terms + 1 offsets: row t is [indptr[t], indptr[t+1]) */
    int64_t n_terms;
    const int64_t *pair_starts;  /* NULL (no pairs), or n_single + 1 offsets into seconds */
    const int32_t *pair_seconds; /* n_pairs second terms, ascending within each first term */
    int64_t n_single;            /* single terms; pair p is row n_single + p */
    int64_t n_pairs;
    const int64_t *codes;        /* n_codes query word codes (see gw_resolve) */
    int64_t n_codes;
    int64_t *rows;               /* row ids: input of gw_query_rows_*, output of the others */
    int64_t *row_lo;             /* scratch for the rows' bounds */
    int64_t *row_hi;
    int64_t capacity;            /* of rows, row_lo and row_hi */
    /* ABI 3: pruning (see _kernel_pruned.h), for rows given by id or by word codes. */
    float *row_tops;             /* NULL, or n_terms remembered row tops (0 = unknown) */
    int64_t prune;               /* GW_PRUNE_OFF, GW_PRUNE_AUTO or GW_PRUNE_ALWAYS */
} gw_query;

/* Offer s to the min-heap of the k best values so far (heap[0..n), the k-th best at the
   root once full); returns the new n. */
static inline int64_t gw_heap_offer(double *heap, int64_t n, int64_t k, double s) {
    if (n < k) {
        heap[n++] = s;
        if (n == k) {
            for (int64_t i = k / 2; i-- > 0;) gw_min_sift(heap, k, i);
        }
    } else if (s > heap[0]) {
        heap[0] = s;
        gw_min_sift(heap, k, 0);
    }
    return n;
}

/* The k-th best eligible positive sum among the documents in docs[start, end), or 0.0
   when fewer than k of them qualify. `heap` holds k doubles. */
static double gw_probe_row(const gw_query *q, int wide, int64_t k, int64_t start, int64_t end,
                           double *heap) {
    const double *acc = q->acc;
    const uint8_t *excluded = q->excluded;
    uint64_t doc_end = q->n_docs >= 0 ? (uint64_t)q->n_docs : UINT64_MAX;
    int64_t n = 0;
    for (int64_t j = start; j < end; j++) {
        int64_t doc = gw_doc(q->docs, wide, j);
        if ((uint64_t)doc >= doc_end || (excluded != NULL && excluded[doc])) continue;
        double s = acc[doc];
        if (s > 0.0) n = gw_heap_offer(heap, n, k, s); /* (a NaN would break the heap) */
    }
    return n == k ? heap[0] : 0.0;
}

/* A lower bound on the k-th best score once acc holds the sums: the k-th best eligible sum
   among the documents of a row: the shortest with at least k documents or, for k <=
   GW_PROBE2_MAX_K, the higher of the two shortest (the rarest terms' documents tend to
   score highest, so the bound is tight; the shortest is often a term pair of low weight,
   so a second row helps when k is small, and costs more than it saves when k is larger:
   measured on SciFact, the kernel gains ~4% at k = 10 and would lose ~15% at k = 100).
   Documents scoring below it cannot make the top k; one scoring exactly it still can (by
   document number).
   0.0 when no such row has k positive eligible sums, or k is large or the rows long (then
   the probe would cost more than it saves). `heap` holds k doubles. */
static double gw_probe(const gw_query *q, int wide, int64_t k, double *heap) {
    if (k <= 0 || k > GW_PROBE_MAX_K) return 0.0;
    int64_t start[2] = {0, 0}, size[2] = {INT64_MAX, INT64_MAX}, limit = q->n_postings;
    for (int64_t r = 0; r < q->n_rows; r++) {
        int64_t a = q->lo[r] > 0 ? q->lo[r] : 0;
        int64_t b = limit >= 0 && q->hi[r] > limit ? limit : q->hi[r];
        if (b - a < k || b - a >= size[1]) continue;
        int at = b - a < size[0] ? 0 : 1;
        if (at == 0) {
            start[1] = start[0];
            size[1] = size[0];
        }
        start[at] = a;
        size[at] = b - a;
    }
    double floor = 0.0;
    for (int i = 0; i < (k <= GW_PROBE2_MAX_K ? 2 : 1); i++) {
        if (size[i] > GW_PROBE_FACTOR * k + GW_PROBE_MIN) break; /* also: no such row */
        double kth = gw_probe_row(q, wide, k, start[i], start[i] + size[i], heap);
        if (kth > floor) floor = kth;
    }
    return floor;
}

/* Add postings [a, b) into q->acc, listing each document touched for the first time in
   q->touched from position t on (branch-free: seen marks the listed ones); returns the new
   length of the list. A document outside [0, n_docs) is skipped and sets *bad. */
static inline int64_t gw_scatter(const gw_query *q, int wide, int64_t a, int64_t b, int64_t t,
                                 int *bad) {
    const void *docs = q->docs;
    const double *scores = q->scores;
    double *acc = q->acc;
    uint8_t *seen = q->seen;
    int64_t *touched = q->touched;
    uint64_t doc_end = q->n_docs >= 0 ? (uint64_t)q->n_docs : UINT64_MAX;
    for (int64_t j = a; j < b; j++) {
        int64_t doc = gw_doc(docs, wide, j);
        if ((uint64_t)doc >= doc_end) {
            *bad = 1;
            continue;
        }
        touched[t] = doc;
        t += !seen[doc];
        seen[doc] = 1;
        acc[doc] += scores[j];
    }
    return t;
}

static inline int64_t gw_topk(const gw_query *q, int wide) {
    const int64_t *lo = q->lo, *hi = q->hi;
    const void *docs = q->docs;
    const double *scores = q->scores;
    const uint8_t *excluded = q->excluded;
    double *acc = q->acc;
    uint8_t *seen = q->seen;
    int64_t *touched = q->touched;
    int64_t n_rows = q->n_rows, n_docs = q->n_docs, limit = q->n_postings;
    /* Unsigned comparison: a negative document is out of range too. */
    uint64_t doc_end = n_docs >= 0 ? (uint64_t)n_docs : UINT64_MAX;
    int64_t k = q->k > 0 ? q->k : 0, postings = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t a = lo[r] > 0 ? lo[r] : 0, b = limit >= 0 && hi[r] > limit ? limit : hi[r];
        if (b > a) postings += b - a;
    }
    if (postings == 0) return 0;
    int64_t spare = k < GW_SPARE_MIN ? k + GW_SPARE_MIN : k < INT64_MAX / 2 ? 2 * k : INT64_MAX;
    gw_candidates cand = {touched, 0, k, spare, 0.0};
    int bad = 0;

    if (n_docs >= 0 && n_docs <= GW_DENSE_RATIO * postings) {
        /* Dense: accumulate, scan every document, clear acc in one go. Four postings at a
           time, checked together (accumulating ~13% faster on SciFact: a row's documents
           are distinct, so the four additions are independent; each document still gets
           its rows' scores in row order). */
        for (int64_t r = 0; r < n_rows && !bad; r++) {
            int64_t a = lo[r] > 0 ? lo[r] : 0, b = limit >= 0 && hi[r] > limit ? limit : hi[r];
            int64_t j = a;
            for (; j + 4 <= b; j += 4) {
                int64_t d0 = gw_doc(docs, wide, j), d1 = gw_doc(docs, wide, j + 1);
                int64_t d2 = gw_doc(docs, wide, j + 2), d3 = gw_doc(docs, wide, j + 3);
                if (((uint64_t)d0 >= doc_end) | ((uint64_t)d1 >= doc_end) |
                    ((uint64_t)d2 >= doc_end) | ((uint64_t)d3 >= doc_end)) {
                    bad = 1;
                    break;
                }
                acc[d0] += scores[j];
                acc[d1] += scores[j + 1];
                acc[d2] += scores[j + 2];
                acc[d3] += scores[j + 3];
            }
            for (; j < b && !bad; j++) {
                int64_t doc = gw_doc(docs, wide, j);
                if ((uint64_t)doc >= doc_end) {
                    bad = 1;
                    break;
                }
                acc[doc] += scores[j];
            }
        }
        if (k > 0 && !bad) {
            /* A candidate must reach the floor. Once a selection has set it (to the k-th
               best so far, all of lower document numbers since documents ascend here),
               reaching is not enough: a tie loses to the kept k-th. Blocks of 8 documents
               are tested first, and the few that reach are listed (after the candidates'
               room in `touched`), all without branches: which blocks reach is
               unpredictable, and mispredicted branches cost more than the whole test. */
            double floor = gw_probe(q, wide, k, q->out_scores);
            int strict = floor == 0.0;
            int64_t n_blocks = n_docs / 8, listed = 0, *blocks = touched + n_docs;
            for (int64_t block = 0; block < n_blocks; block++) {
                blocks[listed] = block;
                listed += gw_block_reaches(acc + 8 * block, floor, strict);
            }
            if (n_blocks * 8 < n_docs) blocks[listed++] = n_blocks; /* the partial last one */
            for (int64_t i = 0; i < listed; i++) {
                int64_t doc = 8 * blocks[i], end = n_docs - doc >= 8 ? doc + 8 : n_docs;
                for (int64_t d = doc; d < end; d++) { /* the room after count is free */
                    double s = acc[d];
                    cand.c[cand.count] = d;
                    cand.count += (strict ? s > floor : s >= floor) & (s > 0.0) &
                                  (excluded == NULL || !excluded[d]);
                }
                if (cand.count >= cand.limit) {
                    gw_shrink(&cand, acc, 0);
                    floor = cand.floor;
                    strict = 1;
                }
            }
        }
        int64_t n = bad ? -1 : gw_finish(&cand, acc, q->out_docs, q->out_scores);
        memset(acc, 0, (size_t)n_docs * sizeof(double));
        return n;
    }

    /* Sparse: remember every touched document once (branch-free), then walk that list,
       clearing seen and the acc of every document that does not stay a candidate. The
       candidates are written over the list's own front (never ahead of the reading). */
    int64_t n_touched = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t a = lo[r] > 0 ? lo[r] : 0, b = limit >= 0 && hi[r] > limit ? limit : hi[r];
        n_touched = gw_scatter(q, wide, a, b, n_touched, &bad);
    }
    if (bad) k = 0; /* still walk the list to clear the scratch */
    cand.floor = gw_probe(q, wide, k, q->out_scores);
    for (int64_t t = 0; t < n_touched; t++) {
        int64_t doc = touched[t];
        double s = acc[doc];
        seen[doc] = 0;
        if (k > 0 && s >= cand.floor && s > 0.0 && !(excluded != NULL && excluded[doc])) {
            cand.c[cand.count++] = doc;
            if (cand.count == cand.limit) gw_shrink(&cand, acc, 1);
        } else {
            acc[doc] = 0.0;
        }
    }
    int64_t n = gw_finish(&cand, acc, q->out_docs, q->out_scores);
    for (int64_t i = 0; i < cand.count; i++) acc[cand.c[i]] = 0.0;
    return bad ? -1 : n;
}

static inline double gw_score(const int64_t *lo, const int64_t *hi, int64_t n_rows,
                              const void *docs, int wide, const double *scores,
                              int64_t limit, int64_t doc) {
    double total = 0.0; /* bincount's starting value; 0.0 + s == s bit for bit */
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t a = lo[r] > 0 ? lo[r] : 0, end = limit >= 0 && hi[r] > limit ? limit : hi[r];
        int64_t b = end; /* the first position with docs >= doc is in [a, b] */
        while (a < b) {
            int64_t mid = a + (b - a) / 2;
            if (gw_doc(docs, wide, mid) < doc) {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        if (a < end && gw_doc(docs, wide, a) == doc) total += scores[a];
    }
    return total;
}

#include "_kernel_pruned.h"

/* The k best documents of one query (see gw_query), best first in out_docs/out_scores:
   the sums of the rows, added in row order like numpy's bincount, positive only, not
   excluded, by score descending then document ascending. Returns how many were written
   (<= k), or -1 when a document lies outside [0, n_docs) (the scratch is still cleared).
   Python calls this one: a single pointer argument is the cheapest ctypes call. */
GW_EXPORT int64_t gw_query_topk(const gw_query *q) {
    return q->wide ? gw_topk(q, 1) : gw_topk(q, 0);
}

/* Score of document `doc` for the rows of q (0.0 if it is in none), equal to the sum
   gw_query_topk computes. Only lo, hi, n_rows, docs, wide, scores, n_postings are read. */
GW_EXPORT double gw_query_score_of(const gw_query *q, int64_t doc) {
    return gw_score(q->lo, q->hi, q->n_rows, q->docs, (int)q->wide, q->scores, q->n_postings,
                    doc);
}

/* -- rows by term id and by query word codes (ABI 2) -------------------------------------- */

/* Query word codes: a term id in [0, n_single) for a word whose term is indexed,
   GW_SKIP for a stop word (it takes no place: the words around it are adjacent), any
   other negative value for a word whose term is not indexed (it breaks pairs). */
#define GW_SKIP (-1)
/* Errors of the entry points below (gw_query_topk's -1 keeps its meaning). */
#define GW_BAD_DOC (-1)
#define GW_BAD_TERM (-2)
#define GW_NO_ROOM (-3)

/* The rows of q->codes, into q->rows: the single term of every code >= 0 in order, then
   the pair row of every two adjacent codes >= 0 (GW_SKIP codes left out in between) that
   the index holds, in order: the same rows, in the same order, as LexicalIndex.query_ids
   over the words' terms. Returns how many, GW_BAD_TERM for a code >= n_single, GW_NO_ROOM
   when capacity < 2 * n_codes. */
static int64_t gw_resolve(const gw_query *q) {
    const int64_t *codes = q->codes;
    int64_t n_codes = q->n_codes, n_single = q->n_single, n = 0;
    if (n_codes <= 0) return 0;
    if (q->capacity < 2 * n_codes) return GW_NO_ROOM;
    int64_t *rows = q->rows;
    for (int64_t i = 0; i < n_codes; i++) {
        int64_t code = codes[i];
        if (code >= n_single) return GW_BAD_TERM;
        if (code >= 0) rows[n++] = code;
    }
    if (q->pair_starts == NULL || q->n_pairs <= 0 || n < 2) return n;
    /* Then the adjacent pairs: a lower-bound search of each pair's second term among the
       second terms of its first, every search advanced a step per round, so that their
       memory reads (mostly cache misses) overlap instead of waiting for one another.
       Scratch: row_lo holds each search's base and, from n_codes on, its range's end;
       row_hi its remaining length; rows from n on its key, overwritten in order by the
       rows found (the i-th key is read before any write reaches it). */
    const int64_t *starts = q->pair_starts;
    const int32_t *seconds = q->pair_seconds;
    int64_t *base = q->row_lo, *end = q->row_lo + n_codes, *len = q->row_hi, *key = rows + n;
    int64_t n_pairs = q->n_pairs, first = GW_SKIP - 1, m = 0;
    for (int64_t i = 0; i < n_codes; i++) {
        int64_t second = codes[i];
        if (second == GW_SKIP) continue;
        if (first >= 0 && second >= 0) {
            int64_t a = starts[first], b = starts[first + 1];
            a = a < 0 ? 0 : a > n_pairs ? n_pairs : a;
            b = b < a ? a : b > n_pairs ? n_pairs : b;
            if (a < b) {
                base[m] = a;
                end[m] = b;
                len[m] = b - a;
                key[m++] = second;
            }
        }
        first = second;
    }
    /* The lower bound stays in [base, base + len]; a step halves len (branch-free). */
    for (int more = m > 0; more;) {
        more = 0;
        for (int64_t i = 0; i < m; i++) {
            int64_t l = len[i];
            if (l > 1) {
                int64_t half = l / 2;
                base[i] += seconds[base[i] + half - 1] < key[i] ? half : 0;
                len[i] = l - half;
                more |= l - half > 1;
            }
        }
    }
    int64_t found = 0;
    for (int64_t i = 0; i < m; i++) {
        int64_t at = base[i] + (seconds[base[i]] < key[i]);
        if (at < end[i] && seconds[at] == key[i]) rows[n + found++] = n_single + at;
    }
    return n + found;
}

/* A copy of q reading the n rows of q->rows: their bounds from indptr into row_lo/row_hi.
   GW_BAD_TERM when a row is outside [0, n_terms). */
static int64_t gw_bounds(const gw_query *q, int64_t n, gw_query *out) {
    const int64_t *rows = q->rows, *indptr = q->indptr;
    uint64_t n_terms = q->n_terms > 0 ? (uint64_t)q->n_terms : 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t row = rows[i];
        if ((uint64_t)row >= n_terms) return GW_BAD_TERM;
        q->row_lo[i] = indptr[row];
        q->row_hi[i] = indptr[row + 1];
    }
    *out = *q;
    out->lo = q->row_lo;
    out->hi = q->row_hi;
    out->n_rows = n;
    return 0;
}

/* gw_query_topk over rows whose ids are known: pruned when q->prune asks for it and the
   query qualifies (a few rows, a bounded k, positive finite scores), identical results. */
static int64_t gw_rows_topk(const gw_query *q) {
    int64_t min_docs = q->prune == GW_PRUNE_ALWAYS ? 0 : GW_PRUNE_MIN_DOCS;
    if (q->prune != GW_PRUNE_OFF && q->k >= 1 && q->k <= GW_PRUNE_MAX_K && q->n_rows >= 2 &&
        q->n_rows <= GW_PRUNE_MAX_ROWS && q->n_docs >= min_docs) {
        int64_t found = q->wide ? gw_topk_pruned(q, 1) : gw_topk_pruned(q, 0);
        if (found != GW_UNPRUNABLE) return found;
    }
    return gw_query_topk(q);
}

/* Resolve q->codes into q->rows (see gw_resolve); returns how many, or an error. */
GW_EXPORT int64_t gw_query_resolve(const gw_query *q) { return gw_resolve(q); }

/* gw_query_topk over the rows q->rows[0..n_rows): their bounds read from indptr. Returns
   the results written, GW_BAD_DOC, GW_BAD_TERM, or GW_NO_ROOM when n_rows > capacity. */
GW_EXPORT int64_t gw_query_rows_topk(const gw_query *q) {
    gw_query rows;
    if (q->n_rows > q->capacity) return GW_NO_ROOM;
    int64_t status = gw_bounds(q, q->n_rows > 0 ? q->n_rows : 0, &rows);
    if (status < 0) return status;
    return gw_rows_topk(&rows);
}

/* gw_query_topk over the rows of the query word codes q->codes (see gw_resolve): a query
   from words to results in one call. Returns as gw_query_rows_topk. */
GW_EXPORT int64_t gw_query_codes_topk(const gw_query *q) {
    gw_query rows;
    int64_t n = gw_resolve(q);
    if (n < 0) return n;
    int64_t status = gw_bounds(q, n, &rows);
    if (status < 0) return status;
    return gw_rows_topk(&rows);
}

/* The score of doc over the rows q->rows[0..n_rows) into *out (see gw_query_score_of);
   returns 0, GW_BAD_TERM or GW_NO_ROOM. */
GW_EXPORT int64_t gw_query_rows_score_of(const gw_query *q, int64_t doc, double *out) {
    gw_query rows;
    if (q->n_rows > q->capacity) return GW_NO_ROOM;
    int64_t status = gw_bounds(q, q->n_rows > 0 ? q->n_rows : 0, &rows);
    if (status < 0) return status;
    *out = gw_query_score_of(&rows, doc);
    return 0;
}

/* The scores of docs[0..count) over the rows q->rows[0..n_rows) into out, each equal to
   gw_query_rows_score_of's (fusion completes the union's BM25 scores with these): rows in
   order, each adding its score to the documents it holds, from 0.0. Ascending docs are
   found by one galloping pass per row; otherwise by a binary search each. Returns 0,
   GW_BAD_TERM or GW_NO_ROOM. */
GW_EXPORT int64_t gw_query_rows_scores(const gw_query *q, const int64_t *docs, int64_t count,
                                       double *out) {
    gw_query rows;
    if (q->n_rows > q->capacity) return GW_NO_ROOM;
    int64_t status = gw_bounds(q, q->n_rows > 0 ? q->n_rows : 0, &rows);
    if (status < 0) return status;
    int ascending = 1;
    for (int64_t j = 1; j < count && ascending; j++) ascending = docs[j - 1] < docs[j];
    if (!ascending) {
        for (int64_t j = 0; j < count; j++) out[j] = gw_query_score_of(&rows, docs[j]);
        return 0;
    }
    for (int64_t j = 0; j < count; j++) out[j] = 0.0;
    const void *row_docs = rows.docs;
    int wide = (int)rows.wide;
    for (int64_t r = 0; r < rows.n_rows; r++) {
        int64_t limit = rows.n_postings;
        int64_t a = rows.lo[r] > 0 ? rows.lo[r] : 0;
        int64_t end = limit >= 0 && rows.hi[r] > limit ? limit : rows.hi[r];
        for (int64_t j = 0; j < count && a < end; j++) {
            a = gw_gallop(row_docs, wide, a, end, docs[j]);
            if (a < end && gw_doc(row_docs, wide, a) == docs[j]) out[j] += rows.scores[a];
        }
    }
    return 0;
}

/* Sum rows [lo[i], hi[i]) of (docs, scores) in row order i = 0..n_rows-1 (so the float
   additions happen in exactly the order numpy's bincount over the concatenated rows does),
   skip documents with excluded != NULL && excluded[doc], keep only sums > 0, and write the
   best k as (score descending, document ascending) into out_docs/out_scores.
   acc (double[n_docs]) and seen (uint8[n_docs]) are caller-owned scratch that must be all
   zero on entry and are returned all zero; touched (int64[capacity]) is scratch with
   capacity >= the number of distinct documents in the rows (pass sum of row lengths).
   Returns the number of results written (<= k). The bounds and documents are trusted,
   and without n_docs the sparse strategy is used: gw_query_topk is the checked, faster
   entry point. */
GW_EXPORT int64_t gw_score_topk(const int64_t *lo, const int64_t *hi, int64_t n_rows,
                                const int64_t *docs, const double *scores,
                                double *acc, uint8_t *seen, int64_t *touched,
                                const uint8_t *excluded, int64_t k,
                                int64_t *out_docs, double *out_scores) {
    gw_query q = {lo, hi, n_rows, docs, 1, scores, -1, -1, acc, seen, touched, excluded, k,
                  out_docs, out_scores};
    return gw_topk(&q, 1);
}

/* Score of one document: sum over rows (row order) of its score in that row (binary
   search; rows are ascending by doc), 0.0 if absent. */
GW_EXPORT double gw_score_of(const int64_t *lo, const int64_t *hi, int64_t n_rows,
                             const int64_t *docs, const double *scores, int64_t doc) {
    return gw_score(lo, hi, n_rows, docs, 1, scores, -1, doc);
}

/* -- load-time checks of a snapshot's arrays (groundwire.index.store.bounds) -------------- */

#define GW_CHECK_POINTERS (-1)
#define GW_CHECK_RANGE (-2)
#define GW_CHECK_ORDER (-3)

/* Whether the CSR rows values[indptr[r]:indptr[r + 1]], r < n_rows (indptr holds n_rows + 1
   offsets), are sound: offsets never decreasing from 0 to n_values (every value in a row),
   every row strictly ascending with its values in [0, upper). Returns 0, GW_CHECK_POINTERS,
   GW_CHECK_RANGE or GW_CHECK_ORDER (the caller names the problem). No scratch, and no
   branch per row (rows average 2-3 values, so a loop per row is mostly overhead): with the
   offsets sound, every value is in a row, so the range is the values' minimum and maximum;
   and the rows are strictly ascending exactly when every descent (values[j] <= values[j-1])
   falls where a non-empty row starts, i.e. when counting the descents over all values and
   at the starts of non-empty rows (each such start is a distinct j) gives the same number.
   Each loop vectorizes. */
GW_EXPORT int64_t gw_check_rows(const int64_t *indptr, int64_t n_rows, const int32_t *values,
                                int64_t n_values, int64_t upper) {
    if (n_rows < 0 || indptr[0] != 0 || indptr[n_rows] != n_values) return GW_CHECK_POINTERS;
    int decreasing = 0;
    for (int64_t r = 0; r < n_rows; r++) decreasing |= indptr[r + 1] < indptr[r];
    if (decreasing) return GW_CHECK_POINTERS;
    if (n_values == 0) return 0;
    int32_t low = values[0], high = values[0];
    int64_t descents = 0;
    for (int64_t j = 1; j < n_values; j++) {
        int32_t v = values[j];
        low = v < low ? v : low;
        high = v > high ? v : high;
        descents += v <= values[j - 1];
    }
    if (low < 0 || (int64_t)high >= upper) return GW_CHECK_RANGE;
    if (n_values < 2) return 0;
    int64_t at_starts = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t lo = indptr[r];
        int64_t starts = (indptr[r + 1] > lo) & (lo > 0);  /* then 0 < lo < n_values */
        int64_t j = starts ? lo : 1;
        at_starts += starts & (values[j] <= values[j - 1]);
    }
    return descents == at_starts ? 0 : GW_CHECK_ORDER;
}

/* Whether every one of the n doubles is positive and finite (NaN is neither): 0, or
   GW_CHECK_RANGE. Branch-free, so the compiler vectorizes it (a counted sum vectorizes
   better than an or of booleans: 1.0 vs 1.8 ms over SciFact's 1.15M scores). */
GW_EXPORT int64_t gw_check_positive_finite(const double *values, int64_t n) {
    int64_t bad = 0;
    for (int64_t j = 0; j < n; j++) {
        double v = values[j];
        bad += !(v > 0.0 && v <= DBL_MAX);
    }
    return bad ? GW_CHECK_RANGE : 0;
}
