// Kernels whose values follow from the element's index: Range and Trilu.
// Range: element type T (-DT=float, int, long) with -DIS_FLOAT=1 for float32 (stored as stype).
// Trilu: element type M as stored (-DM=float, int, uchar ...; ushort for float32 stored as half:
// the bits move unchanged, and 0 is +0 in both).
#ifndef T
#define T float
#endif
#ifndef IS_FLOAT
#define IS_FLOAT 1
#endif
#ifndef M
#define M float
#endif

// Range: out[i] = start + i * delta (ONNX's definition, not a running sum, so no error builds
// up along the output).
#if IS_FLOAT
__kernel void range(__global stype* out, const float start, const float delta, const int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    STOREF(out, i, start + (float)i * delta);
}
#else
__kernel void range(__global T* out, const T start, const T delta, const int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    out[i] = start + (T)i * delta;
}
#endif

// Trilu: x viewed as [batch, R, C]; keeps x[b, r, c] where c - r >= k (upper) or c - r <= k
// (lower), else writes 0. k is read from device memory (an int64 scalar) when has_k.
__kernel void trilu(__global const M* x, __global M* y, __global const long* kp, const int has_k,
                    const int upper, const int R, const int C, const int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const long k = has_k ? kp[0] : 0;
    const long d = (long)(i % C) - (long)((i / C) % R);
    const int keep = upper ? d >= k : d <= k;
    y[i] = keep ? x[i] : (M)0;
}
