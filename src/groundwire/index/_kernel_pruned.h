/* Pruned top-k for groundwire's query kernel: part of _kernel.c's translation unit (it is
 * #included there and uses its helpers), kept apart because it is one concern of its own.
 *
 * MaxScore over rows taken shortest first, exact to the bit. Every score is positive, so
 * a document's sum over some of the rows is a lower bound of its sum over all of them,
 * and each row's largest score (its "top") bounds what the row can still add:
 *
 *   A. Rows are added shortest first into acc (as the sparse path does: acc, seen,
 *      touched). Before a long row, theta = the k-th best partial sum among (some of) the
 *      eligible touched documents is a lower bound of the k-th best final sum. Once the
 *      tops of the rows not yet added sum to less than theta, no untouched document can
 *      reach the top k: those rows are never scattered.
 *   B. The touched documents that can still reach theta (partial + tops left) are the
 *      candidates; the others are cleared.
 *   C. The rows left are added to the candidates only: a scan of the row (seen marks a
 *      candidate) or, when the candidates are few, galloping through it. After each,
 *      candidates that can no longer reach theta go and theta rises to their k-th best.
 *   D. The survivors' sums are recomputed from 0.0 over every row in row order (as the
 *      accumulating paths add them), so their scores equal gw_topk's bit for bit, and the
 *      k best are selected by (score descending, document ascending).
 *
 * It pays on large indexes (GW_PRUNE_MIN_DOCS), where scattering a posting misses the
 * caches: frequent terms' long rows of low scores are skipped or galloped through. A
 * dense query (one gw_topk would scan densely) is pruned only when it can stop within its
 * first quarter of postings, and goes back to the unpruned path when it does not.
 *
 * Bounds compare sums added in different orders, so every comparison leaves a relative
 * slack (GW_BOUND_SLACK) far above the rounding of at most GW_PRUNE_MAX_ROWS additions:
 * a document is dropped only when it provably scores below k others. The tops of long
 * rows are remembered in the index's row_tops (float, rounded up; 0 = not yet known, a
 * negative value = a row holding a score that is not positive and finite, which makes the
 * query take the unpruned path). Two threads filling the same entry write the same value.
 */

/* Rows and k beyond which the unpruned path runs (a query has a few words: the row
   bookkeeping here is per row, on the stack). */
#define GW_PRUNE_MAX_ROWS 64
#define GW_PRUNE_MAX_K 1024
/* Relative slack of every bound: sums of <= 64 positive doubles in two orders differ by
   less than 64 * 2^-52 ~ 1.4e-14 relative; 1e-12 is far above it and prunes as well. */
#define GW_BOUND_SLACK 1e-12
/* Rows this long keep their top in row_tops; shorter ones are scanned each time. */
#define GW_TOP_CACHE_MIN 32
/* Theta is only computed before a row of at least this many postings (reading at most a
   quarter as many touched documents as the row holds: never more than the row costs). */
#define GW_PRUNE_PROBE_MIN 256
/* Candidates gallop through a row (instead of a scan) when it is this many times longer
   than they are many, or 4 times that when they must be sorted first (a heap sort costs
   several scans' worth per candidate; measured at 1M documents: p90 -10%). */
#define GW_GALLOP_RATIO 8
/* Indexes with fewer documents take the unpruned path: their accumulators stay in the
   CPU's caches, where scattering every posting costs less than the pruning's passes
   (SciFact's 5,183 documents: 22 us per query unpruned, 35 us pruned). */
#define GW_PRUNE_MIN_DOCS 131072
/* What gw_topk_pruned returns when the query must take the unpruned path. */
#define GW_UNPRUNABLE (-100)

/* gw_query.prune: never; when it pays (an index of GW_PRUNE_MIN_DOCS documents or more,
   and for a dense query, a stop possible within its first quarter of postings); or
   whenever the query qualifies, without those judgements (tests use it to reach every
   step on small indexes). */
#define GW_PRUNE_OFF 0
#define GW_PRUNE_AUTO 1
#define GW_PRUNE_ALWAYS 2

static inline float gw_top_load(const float *p) {
    return *(const volatile float *)p; /* an aligned 4-byte load: never half written */
}

static inline void gw_top_store(float *p, float value) {
    *(volatile float *)p = value; /* an aligned 4-byte store: never seen half written */
}

/* The largest score of postings [a, b) of row `row` (from row_tops when known), or a
   negative value when one of them is not positive and finite. */
static double gw_row_top(const gw_query *q, int64_t row, int64_t a, int64_t b) {
    float *cache = q->row_tops;
    int cached = cache != NULL && b - a >= GW_TOP_CACHE_MIN && row >= 0 && row < q->n_terms;
    if (cached) {
        float known = gw_top_load(cache + row);
        if (known != 0.0f) return (double)known;
    }
    const double *scores = q->scores;
    double top = 0.0;
    int64_t bad = 0;
    for (int64_t j = a; j < b; j++) {
        double s = scores[j];
        bad += !(s > 0.0 && s <= DBL_MAX);
        top = s > top ? s : top;
    }
    if (bad) top = -1.0;
    if (cached) {
        float value = (float)top; /* rounded up, so it still bounds the row */
        if ((double)value < top) {
            uint32_t bits;
            memcpy(&bits, &value, sizeof bits);
            bits++;
            memcpy(&value, &bits, sizeof value);
        }
        gw_top_store(cache + row, value);
        return (double)value;
    }
    return top;
}

/* Sift c[i] down the max-heap c[0..n). */
static void gw_doc_sift(int64_t *c, int64_t n, int64_t i) {
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= n) return;
        if (child + 1 < n && c[child + 1] > c[child]) child++;
        if (c[i] >= c[child]) return;
        gw_swap(c, i, child);
        i = child;
    }
}

/* Sort c[0..n) ascending (heap sort: no scratch, n log n at worst). */
static void gw_sort_docs(int64_t *c, int64_t n) {
    for (int64_t i = n / 2; i-- > 0;) gw_doc_sift(c, n, i);
    for (int64_t end = n - 1; end > 0; end--) {
        gw_swap(c, 0, end);
        gw_doc_sift(c, end, 0);
    }
}

/* The first position in [a, end) whose document is >= doc (end when none): galloping
   from a, then bisecting the bracket. Documents ascend within a row. */
static inline int64_t gw_gallop(const void *docs, int wide, int64_t a, int64_t end,
                                int64_t doc) {
    int64_t step = 1, b = a;
    while (b < end && gw_doc(docs, wide, b) < doc) {
        a = b + 1;
        b += step;
        step *= 2;
    }
    if (b > end) b = end;
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (gw_doc(docs, wide, mid) < doc) {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    return a;
}

/* The k-th best sum among the n documents of c that are eligible (not excluded) with a
   positive sum, or 0.0 when fewer than k are: one pass, keeping the k best in a min-heap
   (`heap` holds k doubles); c is only read. */
static double gw_kth_sum(const double *acc, const uint8_t *excluded, const int64_t *c,
                         int64_t n, int64_t k, double *heap) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t doc = c[i];
        double s = acc[doc];
        if (s > 0.0 && !(excluded != NULL && excluded[doc])) m = gw_heap_offer(heap, m, k, s);
    }
    return m == k ? heap[0] : 0.0;
}

/* Whether a sum of at most `bound` provably stays below `theta` (a comparison of sums
   added in different orders: the slack covers their rounding). */
static inline int gw_below(double bound, double theta) {
    return bound * (1.0 + GW_BOUND_SLACK) < theta * (1.0 - GW_BOUND_SLACK);
}

/* Return the scratch of documents c[0..n) to zero. */
static void gw_clear(double *acc, uint8_t *seen, const int64_t *c, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        acc[c[i]] = 0.0;
        seen[c[i]] = 0;
    }
}

/* Keep the candidates c[0..n) that can still reach theta (acc + rest, with the slack),
   clearing acc and seen of the others; returns how many stay (in order). */
static int64_t gw_keep_reaching(double *acc, uint8_t *seen, int64_t *c, int64_t n,
                                double rest, double theta) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t doc = c[i];
        if (!gw_below(acc[doc] + rest, theta)) {
            c[m++] = doc;
        } else {
            acc[doc] = 0.0;
            seen[doc] = 0;
        }
    }
    return m;
}

/* One pruned query's state: its rows (clamped bounds, tops), their order shortest first,
   the tops of the rows from each position of that order on, and the candidates. */
typedef struct {
    const gw_query *q;
    int wide;
    int64_t n, k, postings;
    int64_t lo[GW_PRUNE_MAX_ROWS], hi[GW_PRUNE_MAX_ROWS], ord[GW_PRUNE_MAX_ROWS];
    double top[GW_PRUNE_MAX_ROWS], rest[GW_PRUNE_MAX_ROWS + 1];
    int in_order; /* the order shortest first is the row order */
    int sorted;   /* the candidates are in ascending document order */
    int64_t count; /* documents in touched: every one touched, then the candidates */
    double theta;  /* a lower bound of the k-th best final sum */
} gw_pruning;

/* Fill p from q's rows; 0, or GW_UNPRUNABLE when a row holds a score that is not positive
   and finite, or (GW_PRUNE_AUTO) a dense query could only stop late: the dense scan of
   the unpruned path is then faster than scattering the postings before the stop. */
static int64_t gw_plan(gw_pruning *p, const gw_query *q, int wide) {
    int64_t n = q->n_rows, limit = q->n_postings;
    p->q = q;
    p->wide = wide;
    p->n = n;
    p->k = q->k;
    p->postings = 0;
    p->in_order = 1;
    p->sorted = 0;
    p->count = 0;
    p->theta = 0.0;
    for (int64_t r = 0; r < n; r++) {
        int64_t a = q->lo[r] > 0 ? q->lo[r] : 0, b = limit >= 0 && q->hi[r] > limit ? limit : q->hi[r];
        p->lo[r] = a;
        p->hi[r] = b > a ? b : a;
        p->postings += p->hi[r] - a;
        p->top[r] = gw_row_top(q, q->rows[r], a, p->hi[r]);
        if (p->top[r] < 0.0) return GW_UNPRUNABLE;
        int64_t i = r, len = p->hi[r] - a; /* shortest first, ties in row order */
        while (i > 0 && p->hi[p->ord[i - 1]] - p->lo[p->ord[i - 1]] > len) {
            p->ord[i] = p->ord[i - 1];
            i--;
        }
        p->ord[i] = r;
        p->in_order &= i == r;
    }
    p->rest[n] = 0.0;
    for (int64_t i = n; i-- > 0;) p->rest[i] = p->rest[i + 1] + p->top[p->ord[i]];
    if (q->prune == GW_PRUNE_AUTO && q->n_docs <= GW_DENSE_RATIO * p->postings) {
        double most = 0.0; /* the tops of the rows before i: theta's ceiling at i */
        int64_t i = 0, before = 0;
        while (i < n && !gw_below(p->rest[i], most)) {
            most += p->top[p->ord[i]];
            before += p->hi[p->ord[i]] - p->lo[p->ord[i]];
            i++;
        }
        if (i == n || 4 * before > p->postings) return GW_UNPRUNABLE;
    }
    return 0;
}

/* A: add rows shortest first into acc (as the sparse path does), until the tops of the
   rows left sum to less than theta, so no untouched document can reach the top k. Returns
   where it stopped (n when it added every row), -1 for a document out of range, or
   GW_UNPRUNABLE when a dense query cannot stop early after all (scratch cleared).
   theta can only be as high as `cap`: the tops of the rows added (no partial sum is
   higher), then after a check that read every touched document, the theta found plus
   the tops added since. A check is made only before a long row, when it can succeed; it
   reads the documents touched first (those of the shortest rows, the likeliest to score
   high; any subset gives a lower bound), at most a quarter as many as the row holds. */
static int64_t gw_add_shortest(gw_pruning *p) {
    const gw_query *q = p->q;
    double *acc = q->acc, *heap = q->out_scores; /* k doubles, free until the results */
    uint8_t *seen = q->seen;
    int64_t *touched = q->touched, t = 0, added = 0, k = p->k;
    int dense = q->prune == GW_PRUNE_AUTO && q->n_docs <= GW_DENSE_RATIO * p->postings;
    double cap = 0.0;
    for (int64_t i = 0; i < p->n; i++) {
        int64_t r = p->ord[i], a = p->lo[r], b = p->hi[r];
        if (t >= k && b - a >= GW_PRUNE_PROBE_MIN && gw_below(p->rest[i], cap)) {
            int64_t sample = (b - a) / 4 > 4 * k ? (b - a) / 4 : 4 * k;
            double found = gw_kth_sum(acc, q->excluded, touched, t < sample ? t : sample, k, heap);
            p->theta = found > p->theta ? found : p->theta;
            if (gw_below(p->rest[i], p->theta)) {
                p->count = t;
                return i;
            }
            if (sample >= t) cap = p->theta;
        }
        if (dense && 4 * (added + b - a) > p->postings) {
            gw_clear(acc, seen, touched, t);
            return GW_UNPRUNABLE;
        }
        int bad = 0;
        t = gw_scatter(q, p->wide, a, b, t, &bad);
        if (bad) {
            gw_clear(acc, seen, touched, t);
            return -1;
        }
        cap += p->top[r];
        added += b - a;
    }
    p->count = t;
    return p->n;
}

/* B: keep the touched documents that can still reach theta with `left` more (written over
   the front of touched; the others cleared). theta rises to the kept ones' k-th best
   whenever they fill the room, which doubles when a rise does not halve them. */
static void gw_keep_candidates(gw_pruning *p, double left) {
    const gw_query *q = p->q;
    const uint8_t *excluded = q->excluded;
    double *acc = q->acc;
    int64_t *touched = q->touched, t = p->count, k = p->k, c = 0;
    if (t >= k && p->theta == 0.0) {
        int64_t sample = 4 * k + GW_SPARE_MIN;
        p->theta = gw_kth_sum(acc, excluded, touched, t < sample ? t : sample, k, q->out_scores);
    }
    int64_t room = 2 * k + GW_SPARE_MIN;
    for (int64_t i = 0; i < t; i++) {
        int64_t doc = touched[i];
        double s = acc[doc];
        if (s > 0.0 && !gw_below(s + left, p->theta) && !(excluded != NULL && excluded[doc])) {
            touched[c++] = doc;
            if (c == room) {
                double kth = gw_kth_sum(acc, excluded, touched, c, k, q->out_scores);
                if (kth > p->theta) {
                    p->theta = kth;
                    c = gw_keep_reaching(acc, q->seen, touched, c, left, p->theta);
                }
                if (2 * c > room) room *= 2;
            }
        } else {
            acc[doc] = 0.0;
            q->seen[doc] = 0;
        }
    }
    p->count = c;
}

/* Add postings [a, b) of a row to the candidates only: galloping through the row when it
   is much longer than they are (in document order), else scanning it (seen marks them).
   0, or -1 for a document out of range. */
static int64_t gw_add_to_candidates(gw_pruning *p, int64_t a, int64_t b) {
    const gw_query *q = p->q;
    const void *docs = q->docs;
    const double *scores = q->scores;
    double *acc = q->acc;
    int64_t *c = q->touched, n = p->count;
    if (n * (p->sorted ? GW_GALLOP_RATIO : 4 * GW_GALLOP_RATIO) < b - a) {
        if (!p->sorted) gw_sort_docs(c, n);
        p->sorted = 1;
        for (int64_t m = 0; m < n && a < b; m++) {
            a = gw_gallop(docs, p->wide, a, b, c[m]);
            if (a < b && gw_doc(docs, p->wide, a) == c[m]) acc[c[m]] += scores[a];
        }
        return 0;
    }
    uint64_t doc_end = (uint64_t)q->n_docs;
    for (int64_t j = a; j < b; j++) {
        int64_t doc = gw_doc(docs, p->wide, j);
        if ((uint64_t)doc >= doc_end) return -1;
        if (q->seen[doc]) acc[doc] += scores[j];
    }
    return 0;
}

/* The candidates' sums recomputed from 0.0 over every row in row order, as the unpruned
   paths add them (each row galloped through in document order). */
static void gw_exact_sums(gw_pruning *p) {
    const gw_query *q = p->q;
    double *acc = q->acc;
    int64_t *c = q->touched, n = p->count;
    if (!p->sorted) gw_sort_docs(c, n);
    p->sorted = 1;
    for (int64_t m = 0; m < n; m++) acc[c[m]] = 0.0;
    for (int64_t r = 0; r < p->n; r++) {
        int64_t a = p->lo[r], b = p->hi[r];
        for (int64_t m = 0; m < n && a < b; m++) {
            a = gw_gallop(q->docs, p->wide, a, b, c[m]);
            if (a < b && gw_doc(q->docs, p->wide, a) == c[m]) acc[c[m]] += q->scores[a];
        }
    }
}

/* The pruned top k of q's rows (see the top of this file), or GW_UNPRUNABLE (scratch
   untouched or cleared) when the unpruned path must answer; -1 for a document out of
   range that it reads (a row it skips or gallops through is not read whole). Needs
   1 <= k <= GW_PRUNE_MAX_K, 1 <= n_rows <= GW_PRUNE_MAX_ROWS, n_docs >= 0 and q->rows. */
static int64_t gw_topk_pruned(const gw_query *q, int wide) {
    gw_pruning p;
    int64_t status = gw_plan(&p, q, wide);
    if (status < 0) return status;
    int64_t stop = gw_add_shortest(&p);
    if (stop < 0) return stop;
    gw_keep_candidates(&p, p.rest[stop]);
    /* C: the rows left, largest top first (they drop the most candidates), each followed
       by dropping the candidates that can no longer reach theta and raising theta to
       their k-th best. */
    int64_t left_rows[GW_PRUNE_MAX_ROWS], n_left = p.n - stop;
    for (int64_t i = 0; i < n_left; i++) {
        int64_t r = p.ord[stop + i], at = i;
        while (at > 0 && p.top[left_rows[at - 1]] < p.top[r]) {
            left_rows[at] = left_rows[at - 1];
            at--;
        }
        left_rows[at] = r;
    }
    for (int64_t i = 0; i < n_left; i++) {
        int64_t r = left_rows[i];
        if (gw_add_to_candidates(&p, p.lo[r], p.hi[r]) < 0) {
            gw_clear(q->acc, q->seen, q->touched, p.count);
            return -1;
        }
        double left = 0.0; /* the tops of the rows still left, summed afresh (no drift) */
        for (int64_t j = i + 1; j < n_left; j++) left += p.top[left_rows[j]];
        p.count = gw_keep_reaching(q->acc, q->seen, q->touched, p.count, left, p.theta);
        if (p.count > p.k) { /* the candidates' k-th best is a lower bound too */
            double kth = gw_kth_sum(q->acc, q->excluded, q->touched, p.count, p.k, q->out_scores);
            if (kth > p.theta) {
                p.theta = kth;
                p.count = gw_keep_reaching(q->acc, q->seen, q->touched, p.count, left, p.theta);
            }
        }
    }
    /* D: exact sums, unless the rows were all added in row order already; the k best. */
    if (!(p.in_order && stop == p.n)) gw_exact_sums(&p);
    gw_candidates cand = {q->touched, p.count, p.k, p.count, 0.0};
    int64_t found = gw_finish(&cand, q->acc, q->out_docs, q->out_scores);
    gw_clear(q->acc, q->seen, q->touched, p.count);
    return found;
}
