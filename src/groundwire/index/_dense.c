/* Dense kernel for groundwire's vectors (loaded through ctypes, like _kernel.c).
 *
 * Exact top-k of dot products over a row-major matrix that is read in place (a numpy
 * array or a memory map): rows a mask excludes are skipped, never copied, and no BLAS
 * thread pool is involved (a multi-threaded sgemv on a busy machine costs ten times a
 * single-threaded scan here).
 *
 * Storage types:
 *   - float32 rows times a float32 query, summed in GW_LANES independent lanes and then
 *     lane by lane in a fixed order. Without -ffast-math C99 keeps that order, so the
 *     result does not depend on the vector width the compiler chose (SSE2, AVX2 clone).
 *   - int8 rows (row scale s_i) times the query rounded to int16 (scale t): the integer
 *     dot product is exact, so s_i * t * dot is the same on every machine.
 *
 * Ranking compares (score, row) pairs: higher score first, then lower row, so the
 * result is a strict total order whatever the scan order.
 *
 * Entry points: gw_dense_abi_version; gw_dense_topk (k best rows allowed by two
 * optional byte masks); gw_dense_rows (scores of given rows).
 */
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define GW_EXPORT __declspec(dllexport)
#else
#define GW_EXPORT __attribute__((visibility("default")))
#endif

/* Bumped whenever a signature or a semantic changes; the loader refuses a stale library. */
#define GW_DENSE_ABI 1
#define GW_LANES 16
/* int16 query times int8 row: |product| <= 32767 * 127, so 512 of them fit an int32. */
#define GW_I8_BLOCK 512

enum { GW_F32 = 0, GW_I8 = 1 };

/* On x86-64 Linux the dot products also get an AVX2 clone, picked at load time: the same
   arithmetic in wider registers (AVX2 adds no FMA, so the results are identical). */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#define GW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GW_CLONES
#endif

GW_EXPORT int64_t gw_dense_abi_version(void) { return GW_DENSE_ABI; }

static inline float gw_dot_f32(const float *row, const float *q, int64_t d) {
    float lane[GW_LANES] = {0};
    int64_t j = 0;
    for (; j + GW_LANES <= d; j += GW_LANES)
        for (int l = 0; l < GW_LANES; l++) lane[l] += row[j + l] * q[j + l];
    float total = 0.0f;
    for (int l = 0; l < GW_LANES; l++) total += lane[l];
    for (; j < d; j++) total += row[j] * q[j];
    return total;
}

static inline int64_t gw_dot_i8(const int8_t *row, const int16_t *q, int64_t d) {
    int64_t total = 0;
    for (int64_t start = 0; start < d; start += GW_I8_BLOCK) {
        int64_t end = start + GW_I8_BLOCK < d ? start + GW_I8_BLOCK : d;
        int32_t block = 0;
        for (int64_t j = start; j < end; j++) block += (int32_t)(int16_t)row[j] * q[j];
        total += block;
    }
    return total;
}

static inline float gw_score(const void *matrix, int dtype, int64_t d, const float *qf,
                             const int16_t *qi, float qscale, const float *scale, int64_t i) {
    if (dtype == GW_F32) return gw_dot_f32((const float *)matrix + i * d, qf, d);
    return (float)gw_dot_i8((const int8_t *)matrix + i * d, qi, d) * (scale[i] * qscale);
}

/* a ranks below b: lower score, or the same score and a higher row. */
static inline int gw_worse(float sa, int64_t da, float sb, int64_t db) {
    return sa < sb || (sa == sb && da > db);
}

/* Min-heap on (score, row) by gw_worse: the root is the worst kept. */
static void gw_sift(float *s, int64_t *r, int64_t n, int64_t i) {
    for (;;) {
        int64_t c = 2 * i + 1, w = i;
        if (c < n && gw_worse(s[c], r[c], s[w], r[w])) w = c;
        if (c + 1 < n && gw_worse(s[c + 1], r[c + 1], s[w], r[w])) w = c + 1;
        if (w == i) return;
        float ts = s[i]; s[i] = s[w]; s[w] = ts;
        int64_t tr = r[i]; r[i] = r[w]; r[w] = tr;
        i = w;
    }
}

static void gw_sift_up(float *s, int64_t *r, int64_t i) {
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!gw_worse(s[i], r[i], s[p], r[p])) return;
        float ts = s[i]; s[i] = s[p]; s[p] = ts;
        int64_t tr = r[i]; r[i] = r[p]; r[p] = tr;
        i = p;
    }
}

/* The k best rows i < n with (mask == NULL || mask[i]) and (valid == NULL || valid[i]),
 * best first, into out_rows/out_scores (room for k); returns how many (<= k), or -1 for
 * a bad argument. qi/qscale are the int16 query and its scale (int8 only). */
GW_EXPORT GW_CLONES int64_t gw_dense_topk(const void *matrix, int64_t dtype, int64_t n, int64_t d,
                                const float *qf, const int16_t *qi, double qscale,
                                const float *scale, const uint8_t *mask, const uint8_t *valid,
                                int64_t k, int64_t *out_rows, float *out_scores) {
    if (n < 0 || d < 1 || k < 1 || (dtype != GW_F32 && dtype != GW_I8)) return -1;
    if (dtype == GW_F32 ? qf == NULL : (qi == NULL || scale == NULL)) return -1;
    int64_t size = 0;
    float qs = (float)qscale;
    for (int64_t i = 0; i < n; i++) {
        if ((mask && !mask[i]) || (valid && !valid[i])) continue;
        float s = gw_score(matrix, (int)dtype, d, qf, qi, qs, scale, i);
        if (size < k) {
            out_scores[size] = s;
            out_rows[size] = i;
            gw_sift_up(out_scores, out_rows, size++);
        } else if (gw_worse(out_scores[0], out_rows[0], s, i)) {
            out_scores[0] = s;
            out_rows[0] = i;
            gw_sift(out_scores, out_rows, size, 0);
        }
    }
    /* Heap sort: move the worst to the end, repeatedly; leaves best first. */
    for (int64_t end = size - 1; end > 0; end--) {
        float ts = out_scores[0]; out_scores[0] = out_scores[end]; out_scores[end] = ts;
        int64_t tr = out_rows[0]; out_rows[0] = out_rows[end]; out_rows[end] = tr;
        gw_sift(out_scores, out_rows, end, 0);
    }
    return size;
}

/* Scores of the given rows (each < n) into out; returns 0, or -1 for a bad argument. */
GW_EXPORT GW_CLONES int64_t gw_dense_rows(const void *matrix, int64_t dtype, int64_t n, int64_t d,
                                const float *qf, const int16_t *qi, double qscale,
                                const float *scale, const int64_t *rows, int64_t count,
                                float *out) {
    if (n < 0 || d < 1 || count < 0 || (dtype != GW_F32 && dtype != GW_I8)) return -1;
    if (dtype == GW_F32 ? qf == NULL : (qi == NULL || scale == NULL)) return -1;
    for (int64_t j = 0; j < count; j++)
        if (rows[j] < 0 || rows[j] >= n) return -1;
    float qs = (float)qscale;
    for (int64_t j = 0; j < count; j++)
        out[j] = gw_score(matrix, (int)dtype, d, qf, qi, qs, scale, rows[j]);
    return 0;
}
