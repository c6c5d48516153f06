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
 * optional byte masks); gw_dense_rows (scores of given rows); gw_dense_topk_rescored
 * (the same k best float32 rows as gw_dense_topk, found through int8 codes of the rows).
 *
 * Rescored top-k: a first pass scores the int8 codes (a quarter of the bytes, so the
 * scan stays in cache instead of streaming the float32 matrix from memory; AVX2 intrinsics
 * where the CPU has them, exact integer sums either way) and keeps a pool of the best;
 * the pool is scored exactly in float32 (gw_dot_f32, as gw_dense_topk scores), best code
 * first, and the answer is the k best *once certified*: every row not rescored has a code
 * score <= c (the next code of the pool, or the best code left out of it) and its float32
 * score is within `bound` of its code score (the quantization error of rows and query
 * plus float rounding), so once c + bound < the k-th exact score no row left can enter
 * the top k. Without a certificate the full float32 scan answers. Either way the result
 * equals gw_dense_topk's on the float32 rows, bit for bit.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(_WIN32)
#define GW_EXPORT __declspec(dllexport)
#else
#define GW_EXPORT __attribute__((visibility("default")))
#endif

/* Bumped whenever a signature or a semantic changes; the loader refuses a stale library. */
#define GW_DENSE_ABI 3
#define GW_LANES 16
/* int16 query times int8 row: |product| <= 32767 * 127, so 512 of them fit an int32. */
#define GW_I8_BLOCK 512
/* The AVX2 form sums 2 products per int32 lane per 16 values, over two accumulators added
   at the end: 2048 values keep each lane under 65 * 2 * 32767 * 127 < 2^31. */
#define GW_I8_AVX2_BLOCK 2048
/* The rescored scan buffers up to this many times the pool before shrinking it back
   (SciFact, k = 100: 4 shrinks less often than 2 for the same pool). */
#define GW_POOL_BUFFER 4
/* A hint to load a cache line (a no-op where the compiler has no such builtin). */
#if defined(__GNUC__)
#define GW_PREFETCH(p) __builtin_prefetch(p)
#else
#define GW_PREFETCH(p) ((void)(p))
#endif
/* Unit roundoff of float32. */
#define GW_F32_EPS (1.0 / 16777216.0)

enum { GW_F32 = 0, GW_I8 = 1 };

/* On x86-64 Linux the dot products also get an AVX2 clone, picked at load time: the same
   arithmetic in wider registers (AVX2 adds no FMA, so the results are identical). */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#define GW_CLONES __attribute__((target_clones("avx2", "default")))
#define GW_HAVE_AVX2 1
#include <immintrin.h>
#else
#define GW_HAVE_AVX2 0
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

static void gw_heap_sort(float *s, int64_t *r, int64_t size) {
    for (int64_t end = size - 1; end > 0; end--) {
        float ts = s[0]; s[0] = s[end]; s[end] = ts;
        int64_t tr = r[0]; r[0] = r[end]; r[end] = tr;
        gw_sift(s, r, end, 0);
    }
}

/* Push (s, i) into the min-heap of the best `room` (size *size). */
static inline void gw_keep(float *scores, int64_t *rows, int64_t *size, int64_t room, float s,
                           int64_t i) {
    if (*size < room) {
        scores[*size] = s;
        rows[*size] = i;
        gw_sift_up(scores, rows, (*size)++);
    } else if (gw_worse(scores[0], rows[0], s, i)) {
        scores[0] = s;
        rows[0] = i;
        gw_sift(scores, rows, *size, 0);
    }
}

/* The int16 form of a float32 query (step = max |q| / 32767, as the caller would make it:
 * float32 division, rounded half to even) and the bound on how far any row's code score
 * can be from its float32 score: Cauchy-Schwarz on the row error (max_error, the largest
 * |x - x^| over rows) and the query error, plus float rounding of both scores
 * (generously: 4 (d + 16) float32 roundoffs), plus 1e-6. */
static double gw_quantize_query(const float *qf, int64_t d, double max_error, double max_norm,
                                int16_t *qi, double *step_out) {
    float peak = 0.0f;
    for (int64_t j = 0; j < d; j++) {
        float a = qf[j] < 0 ? -qf[j] : qf[j];
        if (a > peak) peak = a;
    }
    double step = peak > 0 ? (double)peak / 32767.0 : 1.0;
    float fstep = (float)step;
    double length = 0.0, error = 0.0;
    for (int64_t j = 0; j < d; j++) {
        float v = rintf(qf[j] / fstep);
        qi[j] = (int16_t)(v > 32767.0f ? 32767.0f : v < -32767.0f ? -32767.0f : v);
        double x = (double)qf[j], e = x - (double)qi[j] * step;
        length += x * x;
        error += e * e;
    }
    length = sqrt(length);
    double rounding = 4.0 * (double)(d + 16) * GW_F32_EPS * length * (1.0 + max_error);
    *step_out = step;
    return max_error * length + max_norm * sqrt(error) + rounding + 1e-6;
}

/* The value of rank `m` (0-based, descending) among a[0..n) (reordered): Hoare's select. */
static float gw_select_desc(float *a, int64_t n, int64_t m) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = a[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                float t = a[i]; a[i] = a[j]; a[j] = t;
                i++;
                j--;
            }
        }
        if (m <= j) hi = j;
        else if (m >= i) lo = i;
        else return a[m];
    }
    return a[m];
}

/* Keep the candidates above the (pool+1)-th best of the *size held (at most `pool` of
 * them, packed) and return that score: the new floor (every row dropped scores <= it). */
static float gw_shrink_pool(float *scores, int64_t *rows, float *copy, int64_t *size,
                            int64_t pool) {
    for (int64_t j = 0; j < *size; j++) copy[j] = scores[j];
    float floor = gw_select_desc(copy, *size, pool);
    int64_t m = 0;
    for (int64_t j = 0; j < *size; j++) {
        if (!(scores[j] > floor)) continue;
        scores[m] = scores[j];
        rows[m++] = rows[j];
    }
    *size = m;
    return floor;
}

/* The pool: at most `pool` allowed rows with the best code scores, into pool_scores /
 * pool_rows (room for GW_POOL_BUFFER * pool; copy: scratch as large), *size of them, and *left, a
 * bound on the code score of every allowed row left out (-inf when none is). Candidates
 * above the floor are buffered; a full buffer shrinks to the pool and raises the floor.
 * Two copies: AVX2 intrinsics where the CPU has them, plain C. */
#define GW_SCAN_BODY(DOT)                                                                     \
    float floor = -INFINITY;                                                                  \
    int64_t m = 0, room = GW_POOL_BUFFER * pool;                                                           \
    for (int64_t i = 0; i < n; i++) {                                                         \
        if ((mask && !mask[i]) || (valid && !valid[i])) continue;                             \
        float s = (float)DOT(codes + i * d, qi, d) * (code_scale[i] * qs);                    \
        if (!(s > floor)) continue;                                                           \
        pool_scores[m] = s;                                                                   \
        pool_rows[m++] = i;                                                                   \
        if (m == room) floor = gw_shrink_pool(pool_scores, pool_rows, copy, &m, pool);        \
    }                                                                                         \
    if (m > pool) floor = gw_shrink_pool(pool_scores, pool_rows, copy, &m, pool);             \
    *size = m;                                                                                \
    *left = floor;

static void gw_scan_plain(const int8_t *codes, const float *code_scale, int64_t n, int64_t d,
                          const int16_t *qi, float qs, const uint8_t *mask, const uint8_t *valid,
                          int64_t pool, float *pool_scores, int64_t *pool_rows, float *copy,
                          int64_t *size, float *left) {
    GW_SCAN_BODY(gw_dot_i8)
}

#if GW_HAVE_AVX2
/* The exact integer dot product gw_dot_i8 computes (integer sums do not depend on their
 * order): rows widened to int16, multiplied and summed in pairs (vpmaddwd), in blocks
 * short enough that no int32 lane can overflow, then summed in int64. */
__attribute__((target("avx2"))) static inline int64_t gw_dot_i8_avx2(const int8_t *row,
                                                                     const int16_t *q,
                                                                     int64_t d) {
    int64_t total = 0, j = 0;
    while (j + 16 <= d) {
        int64_t end = j + GW_I8_AVX2_BLOCK < d ? j + GW_I8_AVX2_BLOCK : d;
        __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
        for (; j + 32 <= end; j += 32) {
            __m256i r0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(row + j)));
            __m256i r1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(row + j + 16)));
            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(r0, _mm256_loadu_si256((const __m256i *)(q + j))));
            a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(r1, _mm256_loadu_si256((const __m256i *)(q + j + 16))));
        }
        for (; j + 16 <= end; j += 16) {
            __m256i r0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(row + j)));
            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(r0, _mm256_loadu_si256((const __m256i *)(q + j))));
        }
        int32_t lanes[16];
        _mm256_storeu_si256((__m256i *)lanes, a0);
        _mm256_storeu_si256((__m256i *)(lanes + 8), a1);
        for (int l = 0; l < 16; l++) total += lanes[l];
    }
    for (; j < d; j++) total += (int32_t)row[j] * q[j];
    return total;
}

__attribute__((target("avx2"))) static void gw_scan_avx2(
    const int8_t *codes, const float *code_scale, int64_t n, int64_t d, const int16_t *qi,
    float qs, const uint8_t *mask, const uint8_t *valid, int64_t pool, float *pool_scores,
    int64_t *pool_rows, float *copy, int64_t *size, float *left) {
    GW_SCAN_BODY(gw_dot_i8_avx2)
}
#endif

/* Max-heap of the pool on (code score, row) by gw_worse: the root is the best left. */
static void gw_sift_best(float *s, int64_t *r, int64_t n, int64_t i) {
    for (;;) {
        int64_t c = 2 * i + 1, w = i;
        if (c < n && gw_worse(s[w], r[w], s[c], r[c])) w = c;
        if (c + 1 < n && gw_worse(s[w], r[w], s[c + 1], r[c + 1])) w = c + 1;
        if (w == i) return;
        float ts = s[i]; s[i] = s[w]; s[w] = ts;
        int64_t tr = r[i]; r[i] = r[w]; r[w] = tr;
        i = w;
    }
}

/* The k best float32 rows (as gw_dense_topk), through int8 codes of the rows (codes,
 * code_scale; max_error / max_norm: the largest row error |x - x^| and code length |x^|).
 * The query is quantized here (gw_quantize_query). A pool of at most `pool` >= k best code
 * scores is rescored in float32, best code first, and the scan stops as soon as the
 * certificate holds: every row not rescored has a code score <= c (the next pool code, or
 * the best code left out of the pool) and c + bound < the k-th exact score so far, so no
 * such row can enter the top k. Without a certificate the full float32 scan answers.
 * *certified is 1 when the pool answered, 0 when the full scan did. Returns how many rows
 * (<= k), -1 for a bad argument, -2 when scratch memory could not be allocated. */
GW_EXPORT GW_CLONES int64_t gw_dense_topk_rescored(
    const float *matrix, const int8_t *codes, const float *code_scale, int64_t n, int64_t d,
    const float *qf, double max_error, double max_norm, const uint8_t *mask,
    const uint8_t *valid, int64_t k, int64_t pool, int64_t *out_rows, float *out_scores,
    int64_t *certified) {
    if (n < 0 || d < 1 || k < 1 || pool < k || !matrix || !codes || !code_scale || !qf)
        return -1;
    int16_t *qi = malloc((size_t)d * sizeof *qi);
    size_t room = (size_t)pool * GW_POOL_BUFFER;
    float *pool_scores = malloc(room * 2 * sizeof *pool_scores); /* and the copy */
    int64_t *pool_rows = malloc(room * sizeof *pool_rows);
    if (!qi || !pool_scores || !pool_rows) {
        free(qi); free(pool_scores); free(pool_rows);
        return -2;
    }
    double step;
    double bound = gw_quantize_query(qf, d, max_error, max_norm, qi, &step);
    float qs = (float)step, left, *copy = pool_scores + room;
    int64_t m = 0;
#if GW_HAVE_AVX2
    if (__builtin_cpu_supports("avx2"))
        gw_scan_avx2(codes, code_scale, n, d, qi, qs, mask, valid, pool, pool_scores, pool_rows, copy, &m, &left);
    else
#endif
        gw_scan_plain(codes, code_scale, n, d, qi, qs, mask, valid, pool, pool_scores, pool_rows, copy, &m, &left);
    /* Rescore best code first: a max-heap of the pool, popped. */
    for (int64_t j = m / 2 - 1; j >= 0; j--) gw_sift_best(pool_scores, pool_rows, m, j);
    int64_t size = 0;
    int ok = left == -INFINITY; /* every allowed row is in the pool: nothing is left out */
    while (m > 0) {
        int64_t i = pool_rows[0];
        m--;
        pool_scores[0] = pool_scores[m];
        pool_rows[0] = pool_rows[m];
        gw_sift_best(pool_scores, pool_rows, m, 0);
        if (m > 0) { /* the next row is read at random: ask for it while this one is scored */
            const char *next_row = (const char *)(matrix + pool_rows[0] * d);
            for (int64_t b = 0; b < d * (int64_t)sizeof(float); b += 64) GW_PREFETCH(next_row + b);
        }
        gw_keep(out_scores, out_rows, &size, k, gw_dot_f32(matrix + i * d, qf, d), i);
        double next = m > 0 ? (double)pool_scores[0] : (double)left;
        if (!ok && size == k && next + bound < (double)out_scores[0]) {
            ok = 1;
            break;
        }
    }
    free(qi);
    free(pool_scores);
    free(pool_rows);
    *certified = ok;
    if (!ok) { /* not certified: the full float32 scan answers */
        size = 0;
        for (int64_t i = 0; i < n; i++) {
            if ((mask && !mask[i]) || (valid && !valid[i])) continue;
            gw_keep(out_scores, out_rows, &size, k, gw_dot_f32(matrix + i * d, qf, d), i);
        }
    }
    gw_heap_sort(out_scores, out_rows, size);
    return size;
}
