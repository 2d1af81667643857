// Attention's own steps (the two matrix products run as GEMM calls, see ops/attention.py) and
// RotaryEmbedding, float32 values (stored as stype, see common.h; local memory stays float).
// -DWG=<work-group size, a power of two> for attention_softmax; -DMASK_BOOL when its attn_mask is
// bool (one byte per element), else the mask is float32 like the scores.
#ifndef WG
#define WG 128
#endif

#ifdef MASK_BOOL
typedef uchar mask_t;
#define MASK_BIAS(m, k) ((m)[k] ? 0.0f : -INFINITY)
#else
typedef stype mask_t;
#define MASK_BIAS(m, k) LOADF(m, k)
#endif

// The tree folds WG partial values in buf with OP into buf[0]; every work-item of the group must
// reach it (as norm.cl's).
#define TREE(OP)                                                   \
    barrier(CLK_LOCAL_MEM_FENCE);                                  \
    for (int s_ = WG / 2; s_ > 0; s_ >>= 1) {                      \
        if (lid < s_) buf[lid] = OP(buf[lid], buf[lid + s_]);      \
        barrier(CLK_LOCAL_MEM_FENCE);                              \
    }
#define ADD(a, b) ((a) + (b))

// Copies a B x H x S x D box between two layouts, one work-item per element: element (b, h, s, d)
// is read at src[b * sb + h * sh + s * ss + d] and written at dst[off + b * db + h * dh + s * ds + d].
// (K / V into the present cache after the past, the heads of Y packed together.)
__kernel void copy_heads(__global const stype* src, __global stype* dst, const long total, const long H,
                         const long S, const long D, const long sb, const long sh, const long ss,
                         const long off, const long db, const long dh, const long ds)
{
    const long gid = get_global_id(0);
    if (gid >= total) return;
    const long d = gid % D, s = (gid / D) % S, h = (gid / (D * S)) % H, b = gid / (D * S * H);
    STOREF(dst, off + b * db + h * dh + s * ds + d, LOADF(src, b * sb + h * sh + s * ss + d));
}

// The bias a score of row (b, h, i), key j gets: -inf where causality, the windows or the
// padding (nonpad_kv_seqlen) exclude the key, plus the attn_mask's (a bool mask: 0 or -inf).
// The query's absolute position is i + offset: offset is the past length, or the valid length
// of batch b less the query length when an external cache states one (has_nonpad).
inline float attention_bias(const long b, const long h, const long i, const long j, const long Sq,
                            const long offset, __global const long* nonpad, const int has_nonpad,
                            const int causal, const long left, const long right,
                            __global const mask_t* mask, const int has_mask, const long mask_len,
                            const long mb, const long mh, const long mi)
{
    const long valid = has_nonpad ? nonpad[b] : -1;
    const long pos = i + (has_nonpad ? valid - Sq : offset);
    int allowed = !causal || j <= pos;
    allowed = allowed && (left < 0 || pos - j <= left) && (right < 0 || j - pos <= right);
    allowed = allowed && (!has_nonpad || j < valid);
    float bias = allowed ? 0.0f : -INFINITY;
    if (has_mask)  // keys past a short mask's end are masked
        bias += j < mask_len ? MASK_BIAS(mask, b * mb + h * mh + i * mi + j) : -INFINITY;
    return bias;
}

// The scores of rows r = (b, h, i) of length T (alpha Q K^T, computed by a GEMM) become the
// attention probabilities, in place: softcap (softcap > 0), plus the bias, then softmax. A row
// whose bias is -inf for every key is all zeros (no NaN). qk receives one stage per score:
// mode 0 the raw score, 1 after softcap, 2 plus the bias, 3 the probability (has_qk = 0: none).
// One work-group per row, max and sum folded in local memory.
__kernel void attention_softmax(__global stype* P, const long rows, const long T, const long Hq, const long Sq,
                                const float softcap, const long offset, __global const long* nonpad,
                                const int has_nonpad, const int causal, const long left, const long right,
                                __global const mask_t* mask, const int has_mask, const long mask_len,
                                const long mb, const long mh, const long mi, __global stype* qk,
                                const int has_qk, const int mode)
{
    __local float buf[WG];
    const long row = get_group_id(0);
    const long n = row < rows ? T : 0;  // past the last row: every barrier, no access
    const int lid = get_local_id(0);
    const long b = row / (Hq * Sq), h = (row / Sq) % Hq, i = row % Sq;
    __global stype* p = P + row * T;
#define BIAS(j) attention_bias(b, h, i, j, Sq, offset, nonpad, has_nonpad, causal, left, right, mask, \
                               has_mask, mask_len, mb, mh, mi)
#define CAPPED(j) (softcap > 0.0f ? softcap * tanh(LOADF(p, j) / softcap) : LOADF(p, j))
    float m = -INFINITY, alive = 0.0f;
    for (long k = lid; k < n; k += WG) {
        const float bias = BIAS(k);
        m = fmax(m, CAPPED(k) + bias);
        alive = fmax(alive, bias == -INFINITY ? 0.0f : 1.0f);
    }
    buf[lid] = m;
    TREE(fmax)
    m = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);  // buf is reused below
    buf[lid] = alive;
    TREE(fmax)
    alive = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (m == -INFINITY) m = 0.0f;  // every key at -inf: exp(-inf - 0) = 0, not NaN
    float s = 0.0f;
    for (long k = lid; k < n; k += WG) s += exp(CAPPED(k) + BIAS(k) - m);
    buf[lid] = s;
    TREE(ADD)
    s = buf[0] == 0.0f ? 1.0f : buf[0];
    for (long k = lid; k < n; k += WG) {
        const float raw = LOADF(p, k), capped = CAPPED(k), biased = capped + BIAS(k);
        const float prob = alive > 0.0f ? exp(biased - m) / s : 0.0f;
        if (has_qk) {
            const float stage = mode == 0 ? raw : mode == 1 ? capped : mode == 2 ? biased : prob;
            STOREF(qk, row * T + k, stage);
        }
        STOREF(p, k, prob);
    }
#undef BIAS
#undef CAPPED
}

// RotaryEmbedding, one work-item per element of X viewed as B x H x S x D (heads_first) or
// B x S x H x D (a 3-D input split into heads). The first R (rotary_dim) elements of a head
// rotate in pairs (x1, x2): (d, d + R/2), or (2i, 2i + 1) when interleaved; pair i of the token
// at position pos turns by cos / sin[pos * R/2 + i]. pos is position_ids[b * S + s] (has_ids), or
// the token's own row b * S + s of a B x S x R/2 cache. A position outside the cache's `positions`
// rows rotates nothing: its rotated elements are 0.
__kernel void rotary(__global const stype* X, __global const stype* cos_cache, __global const stype* sin_cache,
                     __global const long* ids, __global stype* Y, const long total, const long H, const long S,
                     const long D, const long R, const int heads_first, const int interleaved,
                     const int has_ids, const long positions)
{
    const long gid = get_global_id(0);
    if (gid >= total) return;
    const long d = gid % D;
    if (d >= R) {
        STOREF(Y, gid, LOADF(X, gid));
        return;
    }
    const long s = heads_first ? (gid / D) % S : (gid / (D * H)) % S;
    const long b = gid / (D * H * S);
    const long pos = has_ids ? ids[b * S + s] : b * S + s;
    const long half_r = R / 2;
    const long pair = interleaved ? d / 2 : d % half_r;
    const int second = interleaved ? d % 2 : d >= half_r;  // the pair's x2 (the imaginary part)
    const long base = gid - d;
    const long i1 = interleaved ? 2 * pair : pair, i2 = interleaved ? 2 * pair + 1 : pair + half_r;
    if (pos < 0 || pos >= positions) {
        STOREF(Y, gid, 0.0f);
        return;
    }
    const float c = LOADF(cos_cache, pos * half_r + pair), sn = LOADF(sin_cache, pos * half_r + pair);
    const float x1 = LOADF(X, base + i1), x2 = LOADF(X, base + i2);
    STOREF(Y, gid, second ? sn * x1 + c * x2 : c * x1 - sn * x2);
}
