// OneHot and EyeLike: tensors of two values, placed by index.
// OneHot: indices of type IDX (-DIDX=int|long, or float with -DIDX_FLOAT=1, stored as stype),
// values moved as T (-DT=..., ushort for float32 stored as half: the bits move unchanged).
// EyeLike: -DT= the output type, -DIS_FLOAT=1 for float32 (stored as stype).
#ifndef T
#define T float
#endif
#ifndef IDX
#define IDX long
#endif
#ifndef IDX_FLOAT
#define IDX_FLOAT 0
#endif
#ifndef IS_FLOAT
#define IS_FLOAT 0
#endif

// y viewed as [outer, depth, inner], indices as [outer, inner]: y = values[1] where the index
// (negative counting from depth) is the position along depth, values[0] elsewhere. An index out
// of [-depth, depth) matches nothing; a float index matches only when it equals the position (the
// ONNX reference compares the values).
#if IDX_FLOAT
__kernel void one_hot(__global const stype* idx, __global const T* values, __global T* y, const long depth,
                      const long inner, const long n) {
    const long g = get_global_id(0);
    if (g >= n) return;
    const long i = g % inner, j = (g / inner) % depth, o = g / (inner * depth);
    float v = LOADF(idx, o * inner + i);
    if (v < 0.0f) v += (float)depth;
    y[g] = v == (float)j ? values[1] : values[0];
}
#else
__kernel void one_hot(__global const IDX* idx, __global const T* values, __global T* y, const long depth,
                      const long inner, const long n) {
    const long g = get_global_id(0);
    if (g >= n) return;
    const long i = g % inner, j = (g / inner) % depth, o = g / (inner * depth);
    long v = (long)idx[o * inner + i];
    if (v < 0) v += depth;
    y[g] = v == j ? values[1] : values[0];
}
#endif

// EyeLike: y [rows, cols] is 1 on the k-th diagonal (column - row = k), 0 elsewhere.
#if IS_FLOAT
__kernel void eye_like(__global stype* y, const long cols, const long k, const long n) {
    const long g = get_global_id(0);
    if (g >= n) return;
    STOREF(y, g, g % cols - g / cols == k ? 1.0f : 0.0f);
}
#else
__kernel void eye_like(__global T* y, const long cols, const long k, const long n) {
    const long g = get_global_id(0);
    if (g >= n) return;
    y[g] = g % cols - g / cols == k ? (T)1 : (T)0;
}
#endif
