// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (float32). Scores / log-probabilities x
// viewed as [N, C, D], the target as [N, D] of index type I (-DI=int or long), an optional
// per-class weight [C]. One element (n, d) selects its class t = target[n, d]: its weight is 0 when
// t is the ignore_index (has_ignore), else weight[t] (1 without weights), and its loss is
// -x[n, t, d] · weight. A class outside [0, C) that is not ignored (onnxruntime rejects it at run
// time) reads nothing and gives a NaN loss of weight 0, so a bad label shows in the result.
#ifndef I
#define I long
#endif
#ifndef WG
#define WG 128
#endif

// The loss of element e = n * D + d, and its weight in a mean.
inline float element_loss(__global const stype* x, __global const I* target, __global const stype* weight,
                          const int has_weight, const long C, const long D, const long ignore,
                          const int has_ignore, const long e, float* w) {
    const long t = (long)target[e];
    if (has_ignore && t == ignore) {
        *w = 0.0f;
        return 0.0f;
    }
    if (t < 0 || t >= C) {
        *w = 0.0f;
        return NAN;
    }
    *w = has_weight ? LOADF(weight, t) : 1.0f;
    return -LOADF(x, ((e / D) * C + t) * D + e % D) * *w;
}

// reduction=none: one work-item per element, y[e] its loss.
__kernel void nll_elements(__global const stype* x, __global const I* target, __global const stype* weight,
                           const int has_weight, __global stype* y, const long ND, const long C, const long D,
                           const long ignore, const int has_ignore) {
    const long e = get_global_id(0);
    if (e >= ND) return;
    float w;
    STOREF(y, e, element_loss(x, target, weight, has_weight, C, D, ignore, has_ignore, e, &w));
}

// reduction=sum / mean: one work-group of WG work-items. Work-item l folds elements l, l + WG, ...
// in order, then a tree in local memory adds the WG partial sums: a fixed order, so the result
// is the same from run to run. mean divides the sum of losses by the sum of their weights.
__kernel void nll_reduce(__global const stype* x, __global const I* target, __global const stype* weight,
                         const int has_weight, __global stype* y, const long ND, const long C, const long D,
                         const long ignore, const int has_ignore, const int mean) {
    __local float losses[WG];
    __local float weights[WG];
    const int lid = get_local_id(0);
    // A work-item past the first group (a rounded-up global size) still reaches every barrier but
    // folds and writes nothing.
    const long n = get_group_id(0) == 0 ? ND : 0;
    float sl = 0.0f, sw = 0.0f;
    for (long e = lid; e < n; e += WG) {
        float w;
        sl += element_loss(x, target, weight, has_weight, C, D, ignore, has_ignore, e, &w);
        sw += w;
    }
    losses[lid] = sl;
    weights[lid] = sw;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            losses[lid] += losses[lid + s];
            weights[lid] += weights[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && get_group_id(0) == 0) STOREF(y, 0, mean ? losses[0] / weights[0] : losses[0]);
}

// SoftmaxCrossEntropyLoss's log-probabilities: LogSoftmax of x along C, one work-item per (n, d)
// line: max, then the sum of exp(x - max) in order, then x - max - log(sum).
__kernel void log_softmax_lines(__global const stype* x, __global stype* y, const long N, const long C,
                                const long D) {
    const long g = get_global_id(0);
    if (g >= N * D) return;
    const long base = (g / D) * C * D + g % D;
    float m = -INFINITY;
    for (long c = 0; c < C; ++c) m = fmax(m, LOADF(x, base + c * D));
    float s = 0.0f;
    for (long c = 0; c < C; ++c) s += exp(LOADF(x, base + c * D) - m);
    const float ls = log(s);
    for (long c = 0; c < C; ++c) STOREF(y, base + c * D, LOADF(x, base + c * D) - m - ls);
}
