// Causal grouped-query attention over a paged KV cache on the device (kuiper/opencl/cached_attention.py).
//
//   cache_k, cache_v (KV, P, D)        a pool of P slots, blocks of BLOCK consecutive slots (kuiper/layers/pages.py)
//   q, out           (B, H, S, D)      query head h reads K/V head h / (H / KV)
//   index            int32             the forward's page layout, at these offsets:
//     slots    [B x S]  the slot each token's key and value go to
//     ends     [B x S]  the positions a token sees, 0 .. end - 1 (its own position + 1)
//     table_at [B x S]  where the block table of the token's sequence starts in `tables`
//     tables            the block tables, one after the other: position p of a sequence is at slot
//                       table[p / BLOCK] * BLOCK + p % BLOCK
//
// cache_write puts the step's keys and values in their slots; cached_attention then gives each query row
// (b, h, s) to a work-group, which walks its keys in chunks with a running softmax (the "online softmax" of
// FlashAttention): the scores of a chunk, their maximum and sum, and the weighted values added to an
// accumulator rescaled by exp(old maximum - new maximum). Nothing of size S x keys is ever stored: the work
// space is a chunk of weights in local memory, whatever the context. On CPUs cached_attention_blocks does the
// same with a work-item per token and K/V head, block by block of a pool whose keys it stores transposed.

#include "store.h"
#include "lanes.h"
#include "group_reduce.h"
#include "activations.h"  // exp_fit

// k, v (B, KV, S, D) -> each token's slot of the pool. Dimension 0 walks a head's S x D elements, dimension 1
// the (b, kv) heads.
__kernel void cache_write(__global store_t* restrict cache_k, __global store_t* restrict cache_v,
                          __global const store_t* restrict k, __global const store_t* restrict v,
                          __global const int* restrict slots, const int tokens, const int kv_heads, const int dim,
                          const int pool) {
    const int i = get_global_id(0);
    if (i >= tokens * dim) {
        return;
    }
    const int head = get_global_id(1);
    const int b = head / kv_heads;
    const long from = (long)head * tokens * dim + i;
    const int slot = slots[b * tokens + i / dim];
    const long head_at = (long)(head % kv_heads) * pool * dim;
    const long to = head_at + (long)slot * dim + i % dim;
#ifdef KEYS_BY_BLOCK  // coordinate d of a block's keys side by side (cached_attention_blocks)
    const int within = slot % KEYS_BY_BLOCK;
    STORE(cache_k, head_at + (long)(slot - within) * dim + (i % dim) * KEYS_BY_BLOCK + within, LOAD(k, from));
#else
    STORE(cache_k, to, LOAD(k, from));
#endif
    STORE(cache_v, to, LOAD(v, from));
}

// the sum of a float8's lanes, in pairs
inline float sum8(const float8 x) {
    const float4 a = x.lo + x.hi;
    return (a.x + a.y) + (a.z + a.w);
}

// query . key, the query already in local memory: eight running sums, as norm.cl's partial_sum, so that a
// work-item that walks the keys alone (CPUs) does not wait on each addition
inline float dot_row(__local const float* query, __global const store_t* key, const long at, const int dim) {
    float8 s8 = 0.0f;
    int d = 0;
    for (; d + 8 <= dim; d += 8) {
        const float8 qv = (float8)(query[d], query[d + 1], query[d + 2], query[d + 3], query[d + 4], query[d + 5],
                                   query[d + 6], query[d + 7]);
        s8 += qv * LOAD8(key, at + d);
    }
    float s = sum8(s8);
    for (; d < dim; ++d) {
        s += query[d] * LOAD(key, at + d);
    }
    return s;
}

// where key j of a sequence starts in its K/V head's part of the pool (head_at), through its block table
inline long key_at(__global const int* table, const int block, const long head_at, const int j, const int dim) {
    return head_at + ((long)table[j / block] * block + j % block) * dim;
}

// The output row of query head h of token s of batch item b: (b, h, s) in the (B, heads, S, D) layout, or, where
// the heads pass joined the heads again (heads_last), (b, s, h) in (B, S, heads x D)
inline long out_row(const int b, const int h, const int s, const int heads, const int tokens, const int heads_last) {
    return heads_last ? ((long)b * tokens + s) * heads + h : ((long)b * heads + h) * tokens + s;
}

// One work-group per query row, rows ordered (b, h, s). `space` holds, one after the other: the group's
// reduction space (size), a chunk's weights (chunk), the scaled query (dim) and the accumulator (dim).
// A GPU's group takes a chunk of `size` keys at a time, a key per work-item for the scores and a coordinate per
// work-item for the values (reads of v unit-stride across the group). A group of one work-item (a CPU, where
// head_dim is not a multiple of 8) walks `chunk` keys, and the values row by row.
__kernel OWN_LANES void cached_attention(__global store_t* restrict out, __global const store_t* restrict q,
                                         __global const store_t* restrict cache_k,
                                         __global const store_t* restrict cache_v,
                                         __global const int* restrict index, const int heads, const int kv_heads,
                                         const int tokens, const int dim, const int pool, const int block,
                                         const int ends, const int table_at, const int tables, const float scale,
                                         const int heads_last, const int chunk, __local float* space) {
    const int lid = get_local_id(0);
    const int size = get_local_size(0);
    const int row = get_group_id(0);
    __local float* reduce = space;
    __local float* weights = reduce + size;
    __local float* query = weights + chunk;
    __local float* acc = query + dim;

    const int bh = row / tokens;                           // b * heads + h
    const int token = (bh / heads) * tokens + row % tokens;  // (b, s)
    const int kv = (bh % heads) / (heads / kv_heads);
    const long head_at = (long)kv * pool * dim;            // this K/V head's part of the pool
    __global const int* table = index + tables + index[table_at + token];
    const long at = (long)row * dim;                       // this row of q
    const int keys = index[ends + token];                  // causal: positions 0 .. its own
    for (int d = lid; d < dim; d += size) {
        query[d] = LOAD(q, at + d) * scale;
        acc[d] = 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    float m = -INFINITY;  // the largest score so far
    float sum = 0.0f;     // the sum of exp(score - m) so far
    for (int first = 0; first < keys; first += chunk) {
        const int n = min(chunk, keys - first);
        float top = -INFINITY;
        for (int j = lid; j < n; j += size) {
            const float score = dot_row(query, cache_k, key_at(table, block, head_at, first + j, dim), dim);
            weights[j] = score;
            top = score > top ? score : top;
        }
        // every chunk holds a key, so `next` is finite; at the first, exp(-inf) = 0 scales the empty sums away
        top = group_reduce(top, reduce, true);
        const float next = top > m ? top : m;
        const float rescale = exp_fit(m - next);
        float part = 0.0f;
        for (int j = lid; j < n; j += size) {  // each work-item rewrites the weights it wrote itself
            const float e = exp_fit(weights[j] - next);
            weights[j] = e;
            part += e;
        }
        sum = sum * rescale + group_reduce(part, reduce, false);  // its barriers publish the weights to the group
        m = next;
        if (size == 1) {  // the values row by row, unit-stride
            for (int d = 0; d < dim; ++d) {
                acc[d] *= rescale;
            }
            for (int j = 0; j < n; ++j) {
                const float w = weights[j];
                const long v_at = key_at(table, block, head_at, first + j, dim);
                for (int d = 0; d < dim; ++d) {
                    acc[d] += w * LOAD(cache_v, v_at + d);
                }
            }
        } else {
            for (int d = lid; d < dim; d += size) {  // a coordinate per work-item: the same one at every chunk
                float a = acc[d] * rescale;
                for (int j = 0; j < n; ++j) {
                    a += weights[j] * LOAD(cache_v, key_at(table, block, head_at, first + j, dim) + d);
                }
                acc[d] = a;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the next chunk overwrites the weights
    }
    const long out_at = out_row(bh / heads, bh % heads, row % tokens, heads, tokens, heads_last) * dim;
    for (int d = lid; d < dim; d += size) {
        STORE(out, out_at + d, acc[d] / sum);
    }
}

#if defined(HEAD_DIM) && HEAD_DIM % 8 == 0 && defined(QUERIES) && defined(KEYS_BY_BLOCK) && KEYS_BY_BLOCK % 8 == 0
// The CPU's kernel: one work-item per token and K/V head, for the QUERIES query heads that share that K/V head,
// built for the layer's head_dim (-DHEAD_DIM) so that queries and accumulators sit in float8 registers. The
// pool's keys are stored by block, transposed (cache_write with -DKEYS_BY_BLOCK): coordinate d of a block's
// keys lies side by side, so a block's scores are HEAD_DIM multiply-adds of whole vectors of keys, and their
// maximum, exponentials and sum are vector operations too; only the values are read key by key, each once for
// every query head. float8 lanes, not float16: the PoCL wheel builds float16 code for AVX2 into an empty program.
// Every loop of known length is unrolled (#pragma unroll), so that the arrays below stay in registers rather
// than in memory.
#define VECS (HEAD_DIM / 8)
#define KEY_VECS (KEYS_BY_BLOCK / 8)

// The CPU's cache_write: one work-item a token and K/V head (dimension 1: the (b, kv) heads), its key and value
// copied whole, the key a coordinate every KEYS_BY_BLOCK slots. A work-item an element, as cache_write has, makes
// a GPU's accesses coalesce, but a CPU pays a division and a scattered store for every float.
__kernel OWN_LANES void cache_write_rows(__global store_t* restrict cache_k, __global store_t* restrict cache_v,
                                         __global const store_t* restrict k, __global const store_t* restrict v,
                                         __global const int* restrict slots, const int tokens, const int kv_heads,
                                         const int pool) {
    const int token = get_global_id(0);
    const int head = get_global_id(1);
    const int slot = slots[(head / kv_heads) * tokens + token];
    const long from = ((long)head * tokens + token) * HEAD_DIM;
    const long head_at = (long)(head % kv_heads) * pool * HEAD_DIM;
    const int within = slot % KEYS_BY_BLOCK;
    __global store_t* key = cache_k + head_at + (long)(slot - within) * HEAD_DIM + within;
    __global store_t* value = cache_v + head_at + (long)slot * HEAD_DIM;
    #pragma unroll
    for (int d = 0; d < HEAD_DIM; ++d) {
        STORE(key, d * KEYS_BY_BLOCK, LOAD(k, from + d));
        STORE(value, d, LOAD(v, from + d));
    }
}

inline float largest8(const float8 x) {
    const float4 a = x.lo > x.hi ? x.lo : x.hi;
    const float2 b = a.lo > a.hi ? a.lo : a.hi;
    return b.x > b.y ? b.x : b.y;
}

__kernel OWN_LANES void cached_attention_blocks(__global store_t* restrict out, __global const store_t* restrict q,
                                                __global const store_t* restrict cache_k,
                                                __global const store_t* restrict cache_v,
                                                __global const int* restrict index, const int items,
                                                const int heads, const int kv_heads, const int tokens,
                                                const int pool, const int ends, const int table_at,
                                                const int tables, const float scale, const int heads_last) {
    const int item = get_global_id(0);  // (b, kv, s)
    if (item >= items) {
        return;
    }
    const int bkv = item / tokens;
    const int b = bkv / kv_heads;
    const int kv = bkv % kv_heads;
    const int token = b * tokens + item % tokens;
    const long head_at = (long)kv * pool * HEAD_DIM;
    __global const int* table = index + tables + index[table_at + token];
    const int keys = index[ends + token];
    // query head kv * QUERIES + g of token (b, s) is row (b * heads + kv * QUERIES + g) * tokens + s
    const long first_row = ((long)b * heads + kv * QUERIES) * tokens + item % tokens;
    float query[QUERIES][HEAD_DIM];
    float8 acc[QUERIES][VECS];
    float m[QUERIES], sum[QUERIES];
    #pragma unroll
    for (int g = 0; g < QUERIES; ++g) {
        #pragma unroll
        for (int d = 0; d < HEAD_DIM; ++d) {
            query[g][d] = LOAD(q, (first_row + (long)g * tokens) * HEAD_DIM + d) * scale;
        }
        #pragma unroll
        for (int c = 0; c < VECS; ++c) {
            acc[g][c] = 0.0f;
        }
        m[g] = -INFINITY;
        sum[g] = 0.0f;
    }
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    float weights[QUERIES][KEYS_BY_BLOCK];
    for (int first = 0; first < keys; first += KEYS_BY_BLOCK) {
        const long block_at = head_at + (long)table[first / KEYS_BY_BLOCK] * KEYS_BY_BLOCK * HEAD_DIM;
        float8 scores[QUERIES][KEY_VECS];
        #pragma unroll
        for (int g = 0; g < QUERIES; ++g) {
            #pragma unroll
            for (int h = 0; h < KEY_VECS; ++h) {
                scores[g][h] = 0.0f;
            }
        }
        #pragma unroll
        for (int d = 0; d < HEAD_DIM; ++d) {
            #pragma unroll
            for (int h = 0; h < KEY_VECS; ++h) {
                const float8 k = LOAD8(cache_k, block_at + d * KEYS_BY_BLOCK + 8 * h);
                #pragma unroll
                for (int g = 0; g < QUERIES; ++g) {
                    scores[g][h] += query[g][d] * k;
                }
            }
        }
        const int n = min(KEYS_BY_BLOCK, keys - first);
        #pragma unroll
        for (int g = 0; g < QUERIES; ++g) {
            float top = -INFINITY;
            #pragma unroll
            for (int h = 0; h < KEY_VECS; ++h) {
                scores[g][h] = lane + 8 * h < n ? scores[g][h] : -INFINITY;  // past the last key: weight 0
                const float largest = largest8(scores[g][h]);
                top = largest > top ? largest : top;
            }
            const float next = top > m[g] ? top : m[g];
            const float rescale = exp_fit(m[g] - next);
            float part = 0.0f;
            #pragma unroll
            for (int h = 0; h < KEY_VECS; ++h) {
                const float8 w = exp_fit8(scores[g][h] - next);
                vstore8(w, h, weights[g]);
                part += sum8(w);
            }
            sum[g] = sum[g] * rescale + part;
            m[g] = next;
            #pragma unroll
            for (int c = 0; c < VECS; ++c) {
                acc[g][c] *= rescale;
            }
        }
        for (int j = 0; j < n; ++j) {
            #pragma unroll
            for (int c = 0; c < VECS; ++c) {
                const float8 v = LOAD8(cache_v, block_at + j * HEAD_DIM + 8 * c);
                #pragma unroll
                for (int g = 0; g < QUERIES; ++g) {
                    acc[g][c] += weights[g][j] * v;
                }
            }
        }
    }
    #pragma unroll
    for (int g = 0; g < QUERIES; ++g) {
        #pragma unroll
        for (int c = 0; c < VECS; ++c) {
            STORE8(out, out_row(b, kv * QUERIES + g, item % tokens, heads, tokens, heads_last) * HEAD_DIM + 8 * c,
                   acc[g][c] / sum[g]);
        }
    }
}
#endif
