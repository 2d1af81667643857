// Inference BatchNormalization, Softmax / LogSoftmax and the row normalizations (Layer-, RMS-,
// Instance-, GroupNormalization), float32 values (stored as stype, see common.h; local memory stays float). -DWG=<work-group size, a power of two> for the row kernels.
#ifndef WG
#define WG 128
#endif

// The tree folds WG partial values in buf (declared by the kernel) with OP into buf[0]; every
// work-item of the group must reach it.
#define TREE(OP)                                                   \
    barrier(CLK_LOCAL_MEM_FENCE);                                  \
    for (int s_ = WG / 2; s_ > 0; s_ >>= 1) {                      \
        if (lid < s_) buf[lid] = OP(buf[lid], buf[lid + s_]);      \
        barrier(CLK_LOCAL_MEM_FENCE);                              \
    }
#define ADD(a, b) ((a) + (b))

// Y = (X - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c]; X is N x C x (inner), one work-item per element.
__kernel void batchnorm(__global const stype* X, __global const stype* scale, __global const stype* bias,
                        __global const stype* mean, __global const stype* var, __global stype* Y,
                        const int total, const int C, const int inner, const float eps)
{
    const int gid = get_global_id(0);
    if (gid >= total) return;
    const int c = (gid / inner) % C;
    STOREF(Y, gid, (LOADF(X, gid) - LOADF(mean, c)) / sqrt(LOADF(var, c) + eps) * LOADF(scale, c) + LOADF(bias, c));
}

// BatchNormalization with its factors computed at init: Y = X * F[c] + F[C + c] over X: rows x inner,
// row r of channel r % C. Launch: global (inner, rows).
__kernel void scale_shift(__global const stype* X, __global const float* F, __global stype* Y, const int C,
                          const int inner, const int rows)
{
    const int i = get_global_id(0), r = get_global_id(1);
    if (i >= inner || r >= rows) return;
    const int c = r % C;
    const size_t k = (size_t)r * inner + i;
    STOREF(Y, k, LOADF(X, k) * F[c] + F[C + c]);
}

// Softmax (is_log = 0) or LogSoftmax along an axis of extent L: X viewed as outer x L x inner;
// one work-item per (outer, inner) row, for inner > 1 (neighbouring work-items read neighbours).
// A NaN anywhere in a row makes its sum, hence the whole row, NaN (as onnxruntime).
__kernel void softmax(__global const stype* X, __global stype* Y, const long outer, const long L,
                      const long inner, const int is_log)
{
    const long gid = get_global_id(0);
    if (gid >= outer * inner) return;
    const long o = gid / inner, i = gid % inner;
    const long base = o * L * inner + i;
    float mx = -INFINITY;
    for (long k = 0; k < L; ++k) mx = fmax(mx, LOADF(X, base + k * inner));
    float s = 0.0f;
    for (long k = 0; k < L; ++k) s += exp(LOADF(X, base + k * inner) - mx);
    const float ls = log(s);
    for (long k = 0; k < L; ++k) {
        const float d = LOADF(X, base + k * inner) - mx;
        STOREF(Y, base + k * inner, is_log ? d - ls : exp(d) / s);
    }
}

// Softmax / LogSoftmax of contiguous rows of length L: one work-group per row, max and sum
// folded in local memory.
__kernel void softmax_rows(__global const stype* X, __global stype* Y, const long rows, const long L,
                           const int is_log)
{
    __local float buf[WG];
    const long row = get_group_id(0);
    // A group past the last row (a rounded-up global size) still reaches every barrier (PoCL
    // miscompiles a return before one) but reads and writes nothing.
    const long n = row < rows ? L : 0;
    const int lid = get_local_id(0);
    __global const stype* x = X + row * L;
    __global stype* y = Y + row * L;
    float m = -INFINITY;
    for (long k = lid; k < n; k += WG) m = fmax(m, LOADF(x, k));
    buf[lid] = m;
    TREE(fmax)
    m = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);  // buf is reused below
    float s = 0.0f;
    for (long k = lid; k < n; k += WG) s += exp(LOADF(x, k) - m);
    buf[lid] = s;
    TREE(ADD)
    s = buf[0];
    const float ls = log(s);
    for (long k = lid; k < n; k += WG) {
        const float d = LOADF(x, k) - m;
        STOREF(y, k, is_log ? d - ls : exp(d) / s);
    }
}

// Normalizes contiguous rows of length L to zero mean and unit variance (two passes: the mean,
// then the mean squared deviation), then applies scale and bias. One work-group per row.
// centered = 0 is RMSNormalization: the mean is taken as 0, so the variance is the mean square.
// has_stats: LayerNormalization's Mean and InvStdDev outputs, one element per row.
// The scale / bias element of row r, position k is [(r % G) * CG + (k / D) % S]:
//   LayerNormalization, RMSNormalization: G = 1, CG = 0, D = 1, S = the scale's size (a suffix of
//   the row's shape);
//   InstanceNormalization: G = C, CG = 1, D = L, S = 1 (one channel per row);
//   GroupNormalization: G = groups, CG = C / groups, D = spatial size, S = CG.
__kernel void row_norm(__global const stype* X, __global const stype* scale, __global const stype* bias,
                       __global stype* Y, const long rows, const long L, const float eps, const int has_bias,
                       const long G, const long CG, const long D, const long S_scale, const long S_bias,
                       const int centered, const int has_stats, __global stype* mean_out,
                       __global stype* inv_out)
{
    __local float buf[WG];
    const long row = get_group_id(0);
    const long n = row < rows ? L : 0;  // past the last row: every barrier, no access (see softmax_rows)
    const int lid = get_local_id(0);
    __global const stype* x = X + row * L;
    __global stype* y = Y + row * L;
    float s = 0.0f;
    for (long k = lid; centered && k < n; k += WG) s += LOADF(x, k);
    buf[lid] = s;
    TREE(ADD)
    const float mean = buf[0] / (float)L;
    barrier(CLK_LOCAL_MEM_FENCE);  // buf is reused below
    s = 0.0f;
    for (long k = lid; k < n; k += WG) {
        const float d = LOADF(x, k) - mean;
        s += d * d;
    }
    buf[lid] = s;
    TREE(ADD)
    const float inv = 1.0f / sqrt(buf[0] / (float)L + eps);
    if (has_stats && lid == 0 && n > 0) {
        STOREF(mean_out, row, mean);
        STOREF(inv_out, row, inv);
    }
    const long base = (row % G) * CG;
    for (long k = lid; k < n; k += WG) {
        const long j = k / D;
        const float b = has_bias ? LOADF(bias, base + j % S_bias) : 0.0f;
        STOREF(y, k, (LOADF(x, k) - mean) * inv * LOADF(scale, base + j % S_scale) + b);
    }
}

// LocalResponseNormalization across channels: X is N x C x inner; for channel c the window is
// channels [c - lo, c + hi] clipped to [0, C); Y = X / (bias + alpha / size * sum of squares)^beta.
__kernel void lrn(__global const stype* X, __global stype* Y, const long total, const int C, const long inner,
                  const int lo, const int hi, const float alpha_over_size, const float beta, const float bias)
{
    const long gid = get_global_id(0);
    if (gid >= total) return;
    const long i = gid % inner;
    const int c = (int)((gid / inner) % C);
    const long base = (gid / (inner * C)) * C * inner + i;
    float s = 0.0f;
    for (int k = max(0, c - lo); k <= min(C - 1, c + hi); ++k) {
        const float v = LOADF(X, base + k * inner);
        s += v * v;
    }
    const float t = bias + alpha_over_size * s;
    // beta = 0.75 (AlexNet, ZFNet, GoogLeNet): t^0.75 as sqrt(t) * sqrt(sqrt(t)), correctly rounded
    // square roots where PoCL's pow is a slow scalar call: 2 ms against 39 ms per AlexNet LRN
    STOREF(Y, gid, LOADF(X, gid) / (beta == 0.75f ? sqrt(t) * sqrt(sqrt(t)) : pow(t, beta)));
}
