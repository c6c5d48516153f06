/* Fusion kernel for groundwire's retrieval channels (loaded through ctypes, like _dense.c).
 *
 * groundwire.retrieve.channels.fuse in two calls, with the same arithmetic in the same
 * order as its numpy path (plain C99 double operations, no -ffast-math, so the fused
 * scores are equal bit for bit):
 *
 *   gw_fuse_union  the union of the channels' ranked lists (ascending positions), each
 *                  channel's rank (1-based, 0 when it did not list a position) and raw
 *                  score per union member, and the members each channel did not list
 *                  (the caller scores those: BM25 or cosine of the missing members);
 *   gw_fuse_finish each channel's normalized score and contribution per member, the
 *                  totals (channels added in list order, from 0.0) and the best `limit`
 *                  members by total descending, then position ascending.
 *
 * Channel kinds: GW_MINMAX ((x - min) / (max - min), all equal -> 1), GW_FLOOR ((x - floor)
 * / (max - floor), all at the floor -> 0), GW_RRF (weight / (rrf_k + rank) for listed
 * members, else 0; normalized 0). The other normalizations stay in numpy.
 */
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define GW_EXPORT __declspec(dllexport)
#else
#define GW_EXPORT __attribute__((visibility("default")))
#endif

/* Bumped whenever a signature or a semantic changes; the loader refuses a stale library. */
#define GW_FUSION_ABI 1

enum { GW_MINMAX = 0, GW_FLOOR = 1, GW_RRF = 2 };

GW_EXPORT int64_t gw_fusion_abi_version(void) { return GW_FUSION_ABI; }

/* Stable merge sort of entry indexes perm[0..n) by key[perm[i]] (tmp: room for n). */
static void gw_sort_by_key(int64_t *perm, int64_t *tmp, int64_t n, const int64_t *key) {
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n;
            int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t a = lo, b = mid, t = lo;
            while (a < mid && b < hi) tmp[t++] = key[perm[b]] < key[perm[a]] ? perm[b++] : perm[a++];
            while (a < mid) tmp[t++] = perm[a++];
            while (b < hi) tmp[t++] = perm[b++];
        }
        for (int64_t i = 0; i < n; i++) perm[i] = tmp[i];
    }
}

/* The union of n_lists lists: list c holds lengths[c] positions with their scores, the
 * lists one after another in docs/scores (room >= the sum of the lengths); scratch holds
 * 2 * room int64. Writes union_out[0..u), ranks[c * room + j] and raw[c * room + j] for
 * j < u (0 and 0.0 where list c lacks member j), missing[c * room + ...] the members list c
 * lacks (ascending) and missing_counts[c]. Returns u, or -1 for a bad argument or a
 * position listed twice by one list (the caller's numpy path decides). */
GW_EXPORT int64_t gw_fuse_union(int64_t n_lists, const int64_t *docs, const double *scores,
                                const int64_t *lengths, int64_t room, int64_t *scratch,
                                int64_t *union_out, int64_t *ranks, double *raw,
                                int64_t *missing, int64_t *missing_counts) {
    if (n_lists < 1 || room < 0) return -1;
    int64_t total = 0;
    for (int64_t c = 0; c < n_lists; c++) {
        if (lengths[c] < 0) return -1;
        total += lengths[c];
    }
    if (total > room) return -1;
    int64_t *perm = scratch, *tmp = scratch + room;
    for (int64_t e = 0; e < total; e++) perm[e] = e;
    gw_sort_by_key(perm, tmp, total, docs);
    for (int64_t i = 0; i < n_lists * room; i++) {
        ranks[i] = 0;
        raw[i] = 0.0;
    }
    int64_t u = -1;
    for (int64_t i = 0; i < total; i++) {
        int64_t at = perm[i], doc = docs[at];
        if (u < 0 || union_out[u] != doc) union_out[++u] = doc;
        int64_t c = 0, start = 0; /* the list entry `at` belongs to */
        while (at >= start + lengths[c]) start += lengths[c++];
        if (ranks[c * room + u] != 0) return -1; /* listed twice by one list */
        ranks[c * room + u] = at - start + 1;
        raw[c * room + u] = scores[at];
    }
    u += 1;
    for (int64_t c = 0; c < n_lists; c++) {
        int64_t m = 0;
        for (int64_t j = 0; j < u; j++)
            if (ranks[c * room + j] == 0) missing[c * room + m++] = j;
        missing_counts[c] = m;
    }
    return u;
}

/* a ranks below b: lower total, or the same total and a higher member (position). */
static inline int gw_below(const double *totals, int64_t a, int64_t b) {
    return totals[a] < totals[b] || (totals[a] == totals[b] && a > b);
}

static void gw_sift_down(int64_t *heap, int64_t n, int64_t i, const double *totals) {
    for (;;) {
        int64_t c = 2 * i + 1, w = i;
        if (c < n && gw_below(totals, heap[c], heap[w])) w = c;
        if (c + 1 < n && gw_below(totals, heap[c + 1], heap[w])) w = c + 1;
        if (w == i) return;
        int64_t t = heap[i]; heap[i] = heap[w]; heap[w] = t;
        i = w;
    }
}

/* Normalized scores norm, contributions added (both [c * room + j]) and totals of the u
 * members from ranks/raw (gw_fuse_union's, with the missing members' raw scores filled
 * in), channel c of kind kinds[c] with weights[c] (and floors[c] for GW_FLOOR); then the
 * best min(limit, u) members (indexes into the union) into order, best first. Members are
 * in ascending position, so a lower index is a lower position. Returns how many, or -1. */
GW_EXPORT int64_t gw_fuse_finish(int64_t n_lists, int64_t u, int64_t room, const int64_t *kinds,
                                 const double *weights, const double *floors, int64_t rrf_k,
                                 const int64_t *ranks, const double *raw, double *norm,
                                 double *added, double *totals, int64_t limit,
                                 int64_t *order) {
    if (n_lists < 1 || u < 0 || u > room || limit < 0) return -1;
    for (int64_t j = 0; j < u; j++) totals[j] = 0.0;
    for (int64_t c = 0; c < n_lists; c++) {
        const int64_t *rank = ranks + c * room;
        const double *x = raw + c * room;
        double *nrm = norm + c * room, *add = added + c * room, w = weights[c];
        if (kinds[c] == GW_RRF) {
            for (int64_t j = 0; j < u; j++) {
                nrm[j] = 0.0;
                add[j] = rank[j] > 0 ? w / (double)(rrf_k + rank[j]) : 0.0;
            }
        } else if (kinds[c] == GW_MINMAX || kinds[c] == GW_FLOOR) {
            double high = x[0], low = x[0];
            for (int64_t j = 1; j < u; j++) {
                if (x[j] > high) high = x[j];
                if (x[j] < low) low = x[j];
            }
            if (kinds[c] == GW_FLOOR) low = floors[c];
            for (int64_t j = 0; j < u; j++) {
                nrm[j] = high == low ? (kinds[c] == GW_MINMAX ? 1.0 : 0.0)
                                     : (x[j] - low) / (high - low);
                add[j] = w * nrm[j];
            }
        } else {
            return -1;
        }
        for (int64_t j = 0; j < u; j++) totals[j] += add[j];
    }
    int64_t keep = limit < u ? limit : u, size = 0;
    if (keep == 0) return 0;
    for (int64_t j = 0; j < u; j++) { /* a min-heap of the best `keep` (root: the worst) */
        if (size < keep) {
            order[size] = j;
            for (int64_t i = size++; i > 0;) {
                int64_t p = (i - 1) / 2;
                if (!gw_below(totals, order[i], order[p])) break;
                int64_t t = order[i]; order[i] = order[p]; order[p] = t;
                i = p;
            }
        } else if (gw_below(totals, order[0], j)) {
            order[0] = j;
            gw_sift_down(order, size, 0, totals);
        }
    }
    for (int64_t end = size - 1; end > 0; end--) { /* heap sort: leaves best first */
        int64_t t = order[0]; order[0] = order[end]; order[end] = t;
        gw_sift_down(order, end, 0, totals);
    }
    return size;
}
