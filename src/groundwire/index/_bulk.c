/* The sort-free passes of a bulk build (see _bulk.py, index/bulk.py).
 *
 * gw_doc_postings: one batch of analyzed documents (term ids, document-major, fields in
 * order, -1 for a dropped word) → each document's postings in order of first appearance:
 * single terms with a frequency byte per field, adjacent pairs with one byte; the field
 * lengths; frequencies of 255 and more listed exactly (overflow).
 * gw_bucket_scatter: a stable counting sort by an int32 key in [0, n_keys) of several
 * chunks at once, moving payload columns (and the documents, given as postings per
 * document) to their sorted places: O(n + n_keys), no comparison.
 *
 * Together they replace the numpy builder's sorts of (term, document) keys: postings of
 * documents in ascending order, stably sorted by term, are sorted by (term, document).
 * No Python headers; loaded through ctypes. Arrays are C-contiguous, native order.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GW_BULK_ABI 1
#define GW_TF_OVERFLOW 255

int64_t gw_bulk_abi_version(void) { return GW_BULK_ABI; }

static inline uint64_t pair_slot(uint64_t key, int bits) {
    return (key * 0x9E3779B97F4A7C15ULL) >> (64 - bits);
}

/* Writes a posting's frequency byte; a frequency of 255 or more also goes to the
 * overflow lists (position, field, exact value). Returns 0, or -1 when they are full. */
static inline int put_tf(uint8_t *counts, int64_t pos, int64_t tf, int64_t field,
                         int64_t *ovf_pos, int32_t *ovf_field, int64_t *ovf_tf,
                         int64_t ovf_cap, int64_t *ovf_n) {
    if (tf < GW_TF_OVERFLOW) {
        counts[pos] = (uint8_t)tf;
        return 0;
    }
    counts[pos] = GW_TF_OVERFLOW;
    if (*ovf_n >= ovf_cap) return -1;
    ovf_pos[*ovf_n] = pos;
    ovf_field[*ovf_n] = (int32_t)field;
    ovf_tf[*ovf_n] = tf;
    (*ovf_n)++;
    return 0;
}

/* seg_len: n_docs x n_fields word counts (dropped words included). lengths:
 * (n_fields + with_pairs) x n_docs kept words (pairs: pair occurrences). Single postings
 * of unweighted fields are not made (their words still count in lengths and pairs).
 * s_counts: n_fields x cap. Overflow field n_fields marks a pair posting. Returns 0,
 * -1 for a term id out of range, -2 when out of memory. */
int64_t gw_doc_postings(
    int64_t n_docs, int64_t n_fields, const int32_t *ids, const int64_t *seg_len,
    const uint8_t *weighted, const uint8_t *pair_source, int64_t with_pairs, int64_t n_terms,
    int64_t cap, int32_t *lengths,
    int32_t *s_term, uint8_t *s_counts, int32_t *s_per_doc, int64_t *s_n,
    int32_t *p_first, int32_t *p_second, uint8_t *p_counts, int32_t *p_per_doc, int64_t *p_n,
    int64_t ovf_cap, int64_t *ovf_pos, int32_t *ovf_field, int64_t *ovf_tf, int64_t *ovf_n)
{
    int64_t max_words = 1, at = 0, sn = 0, pn = 0, rc = 0;
    int bits = 4;
    if (n_fields <= 0 || n_fields > 64) return -1;
    for (int64_t d = 0; d < n_docs; d++) {
        int64_t w = 0;
        for (int64_t f = 0; f < n_fields; f++) w += seg_len[d * n_fields + f];
        if (w > max_words) max_words = w;
    }
    while (((int64_t)1 << bits) < 2 * max_words) bits++;
    int64_t h_size = (int64_t)1 << bits;
    int32_t *last = malloc(sizeof(int32_t) * (size_t)(n_terms > 0 ? n_terms : 1));
    int64_t *slot = malloc(sizeof(int64_t) * (size_t)(n_terms > 0 ? n_terms : 1));
    int32_t *tf = calloc((size_t)(max_words * n_fields), sizeof(int32_t));
    int32_t *ptf = malloc(sizeof(int32_t) * (size_t)max_words);
    uint64_t *h_key = malloc(sizeof(uint64_t) * (size_t)h_size);
    int64_t *h_val = malloc(sizeof(int64_t) * (size_t)h_size);
    if (!last || !slot || !tf || !ptf || !h_key || !h_val) { rc = -2; goto done; }
    for (int64_t t = 0; t < n_terms; t++) last[t] = -1;
    for (int64_t h = 0; h < h_size; h++) h_key[h] = UINT64_MAX;
    *ovf_n = 0;
    for (int64_t d = 0; d < n_docs; d++) {
        const int64_t s0 = sn, p0 = pn;
        int64_t start = at, occurrences = 0;
        for (int64_t f = 0; f < n_fields; f++) {
            const int64_t len = seg_len[d * n_fields + f];
            int64_t kept = 0;
            for (int64_t i = start; i < start + len; i++) {
                const int32_t t = ids[i];
                if (t < 0) continue;
                if (t >= n_terms) { rc = -1; goto done; }
                kept++;
                if (!weighted[f]) continue;
                if (last[t] != (int32_t)d) {
                    last[t] = (int32_t)d;
                    slot[t] = sn;
                    s_term[sn++] = t;
                }
                tf[(slot[t] - s0) * n_fields + f]++;
            }
            lengths[f * n_docs + d] = (int32_t)kept;
            if (with_pairs && pair_source[f]) {  /* adjacent kept words of this field */
                int32_t prev = -1;
                for (int64_t i = start; i < start + len; i++) {
                    const int32_t t = ids[i];
                    if (t < 0) continue;
                    if (prev >= 0) {
                        uint64_t key = ((uint64_t)(uint32_t)prev << 32) | (uint32_t)t;
                        uint64_t h = pair_slot(key, bits);
                        while (h_key[h] != UINT64_MAX && h_key[h] != key) h = (h + 1) & (h_size - 1);
                        if (h_key[h] == key) {
                            ptf[h_val[h] - p0]++;
                        } else {
                            h_key[h] = key;
                            h_val[h] = pn;
                            p_first[pn] = prev;
                            p_second[pn] = t;
                            ptf[pn - p0] = 1;
                            pn++;
                        }
                        occurrences++;
                    }
                    prev = t;
                }
            }
            start += len;
        }
        if (with_pairs) lengths[n_fields * n_docs + d] = (int32_t)occurrences;
        for (int64_t p = s0; p < sn; p++) {
            for (int64_t f = 0; f < n_fields; f++) {
                int32_t *c = &tf[(p - s0) * n_fields + f];
                if (put_tf(s_counts + f * cap, p, *c, f, ovf_pos, ovf_field, ovf_tf, ovf_cap, ovf_n)) {
                    rc = -2;
                    goto done;
                }
                *c = 0;
            }
        }
        for (int64_t p = p0; p < pn; p++) {  /* and empty the pair table for the next document */
            uint64_t key = ((uint64_t)(uint32_t)p_first[p] << 32) | (uint32_t)p_second[p];
            uint64_t h = pair_slot(key, bits);
            while (h_key[h] != key) h = (h + 1) & (h_size - 1);
            h_key[h] = UINT64_MAX;
            if (put_tf(p_counts, p, ptf[p - p0], n_fields, ovf_pos, ovf_field, ovf_tf, ovf_cap, ovf_n)) {
                rc = -2;
                goto done;
            }
        }
        /* The lookups above never stop at an empty slot, so emptying slots one by one
         * keeps every remaining key findable; afterwards the table is empty again. */
        s_per_doc[d] = (int32_t)(sn - s0);
        p_per_doc[d] = (int32_t)(pn - p0);
        at = start;
    }
    *s_n = sn;
    *p_n = pn;
    (void)cap;
done:
    free(last); free(slot); free(tf); free(ptf); free(h_key); free(h_val);
    return rc;
}

/* Stable counting sort of n_chunks chunks (in order) by keys in [0, n_keys).
 * in[p * n_chunks + c]: payload column p of chunk c (width[p] bytes per item: 1 or 4);
 * out[p]: the sorted column. With per_doc (n_docs[c] counts per chunk, documents
 * numbered from doc_base[c]), out_docs gets each item's document. bounds (n_keys + 1):
 * where each key's items start. watch (ascending indexes into the concatenation) →
 * watch_out: their sorted places. Returns 0, -1 for a key out of range or a bad width,
 * -2 when out of memory. */
int64_t gw_bucket_scatter(
    int64_t n_chunks, const int64_t *chunk_n, const int32_t *const *keys, int64_t n_keys,
    const int32_t *const *per_doc, const int64_t *n_docs, const int64_t *doc_base, int32_t *out_docs,
    int64_t n_payload, const void *const *in, void *const *out, const int64_t *width,
    int64_t *bounds, int64_t n_watch, const int64_t *watch, int64_t *watch_out)
{
    for (int64_t k = 0; k <= n_keys; k++) bounds[k] = 0;
    for (int64_t c = 0; c < n_chunks; c++) {
        for (int64_t i = 0; i < chunk_n[c]; i++) {
            int32_t k = keys[c][i];
            if (k < 0 || k >= n_keys) return -1;
            bounds[k + 1]++;
        }
    }
    for (int64_t k = 0; k < n_keys; k++) bounds[k + 1] += bounds[k];
    int64_t *cursor = malloc(sizeof(int64_t) * (size_t)(n_keys > 0 ? n_keys : 1));
    if (!cursor) return -2;
    /* The places, with the watched items and the documents. */
    memcpy(cursor, bounds, sizeof(int64_t) * (size_t)n_keys);
    int64_t global = 0, w = 0;
    for (int64_t c = 0; c < n_chunks; c++) {
        const int32_t *kc = keys[c];
        int64_t i = 0;
        if (per_doc != NULL && out_docs != NULL) {
            for (int64_t d = 0; d < n_docs[c]; d++) {
                const int32_t doc = (int32_t)(doc_base[c] + d);
                for (int64_t e = i + per_doc[c][d]; i < e; i++, global++) {
                    int64_t dst = cursor[kc[i]]++;
                    out_docs[dst] = doc;
                    while (w < n_watch && watch[w] == global) watch_out[w++] = dst;
                }
            }
        } else {
            for (; i < chunk_n[c]; i++, global++) {
                int64_t dst = cursor[kc[i]]++;
                while (w < n_watch && watch[w] == global) watch_out[w++] = dst;
            }
        }
    }
    for (int64_t p = 0; p < n_payload; p++) {
        memcpy(cursor, bounds, sizeof(int64_t) * (size_t)n_keys);
        for (int64_t c = 0; c < n_chunks; c++) {
            const int32_t *kc = keys[c];
            if (width[p] == 1) {
                const uint8_t *src = in[p * n_chunks + c];
                uint8_t *dst = out[p];
                for (int64_t i = 0; i < chunk_n[c]; i++) dst[cursor[kc[i]]++] = src[i];
            } else if (width[p] == 4) {
                const int32_t *src = in[p * n_chunks + c];
                int32_t *dst = out[p];
                for (int64_t i = 0; i < chunk_n[c]; i++) dst[cursor[kc[i]]++] = src[i];
            } else {
                free(cursor);
                return -1;
            }
        }
    }
    free(cursor);
    return 0;
}

/* Words → word numbers, through a hash table that lives across calls (its arrays are
 * the caller's). buf holds words separated by spaces (byte 32: UTF-8 never has it inside
 * a character); seg_end[s] is where segment s ends. Each word gets its number (the
 * order it was first seen in); a word not seen before is added (table->n_words grows).
 * state = {byte position, segment, words written}: the call resumes there and returns
 * 0 when done, 1 when a table array is full (grow it, rehash if the slots grew, call
 * again), -1 for inconsistent input. */
typedef struct {
    int64_t n_slots;      /* a power of two, over twice n_words + what a call adds */
    int32_t *slots;       /* word number + 1, 0: empty */
    int64_t n_words, word_cap;
    int64_t *word_off;    /* where each word's bytes start in arena */
    int32_t *word_len;
    uint64_t *word_hash;
    int64_t arena_len, arena_cap;
    uint8_t *arena;
} gw_words;

static inline uint64_t word_hash(const uint8_t *p, int64_t n) {
    uint64_t h = 1469598103934665603ULL;  /* FNV-1a, then a final mix */
    for (int64_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 32);
}

int64_t gw_word_numbers(const uint8_t *buf, int64_t len, int64_t n_seg, const int64_t *seg_end,
                        gw_words *t, int32_t *out, int64_t out_cap, int64_t *seg_words,
                        int64_t *state)
{
    int64_t pos = state[0], seg = state[1], n_out = state[2];
    const int64_t mask = t->n_slots - 1;
    while (pos < len) {
        while (pos < len && buf[pos] == ' ') pos++;
        if (pos >= len) break;
        int64_t end = pos;
        while (end < len && buf[end] != ' ') end++;
        while (seg < n_seg && seg_end[seg] <= pos) seg++;
        if (seg >= n_seg || end > seg_end[seg] || n_out >= out_cap) return -1;
        const int64_t n = end - pos;
        const uint64_t h = word_hash(buf + pos, n);
        int64_t s = (int64_t)(h & (uint64_t)mask);
        int32_t found = -1;
        while (t->slots[s]) {
            const int32_t w = t->slots[s] - 1;
            if (t->word_hash[w] == h && t->word_len[w] == n &&
                memcmp(t->arena + t->word_off[w], buf + pos, (size_t)n) == 0) {
                found = w;
                break;
            }
            s = (s + 1) & mask;
        }
        if (found < 0) {
            if (t->n_words >= t->word_cap || t->arena_len + n > t->arena_cap ||
                2 * (t->n_words + 1) > t->n_slots) {
                state[0] = pos; state[1] = seg; state[2] = n_out;
                return 1;
            }
            found = (int32_t)t->n_words++;
            t->word_off[found] = t->arena_len;
            t->word_len[found] = (int32_t)n;
            t->word_hash[found] = h;
            memcpy(t->arena + t->arena_len, buf + pos, (size_t)n);
            t->arena_len += n;
            t->slots[s] = found + 1;
        }
        out[n_out++] = found;
        seg_words[seg]++;
        pos = end;
    }
    state[0] = pos; state[1] = seg; state[2] = n_out;
    return 0;
}

/* Put every word back into fresh (zeroed) slots after they grew. */
void gw_word_rehash(gw_words *t) {
    const int64_t mask = t->n_slots - 1;
    for (int64_t w = 0; w < t->n_words; w++) {
        int64_t s = (int64_t)(t->word_hash[w] & (uint64_t)mask);
        while (t->slots[s]) s = (s + 1) & mask;
        t->slots[s] = (int32_t)w + 1;
    }
}
