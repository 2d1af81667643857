// ScatterElements, ScatterND (reduction none, add, mul, max, min) and GatherND, indices of type I
// (-DI=int or long). Element type T (-DT=...); -DIS_FLOAT=1 for float32, stored as stype and
// combined in float. -DOP= the reduction: 0 none (the update replaces), 1 add, 2 mul, 3 max, 4 min.
//
// A scatter first copies data into the output, then one work-item applies, in order, every
// update that can land on its set of output elements: no two work-items write the same element,
// so duplicate indices combine in the order of the ONNX reference and the result does not depend
// on scheduling. An index below -dim or at/above dim (onnxruntime rejects it at run time) writes
// nothing, so it never reaches outside the output.
#ifndef T
#define T float
#endif
#ifndef I
#define I long
#endif
#ifndef IS_FLOAT
#define IS_FLOAT 0
#endif
#ifndef OP
#define OP 0
#endif

#if IS_FLOAT
#define ELEM stype
#define VAL float
#define LD(p, i) LOADF(p, i)
#define ST(p, i, v) STOREF(p, i, v)
#else
#define ELEM T
#define VAL T
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (v))
#endif

// old combined with the update u (as the ONNX reference: max / min keep the old value unless
// the update is greater / smaller).
inline VAL combine(const VAL old, const VAL u) {
#if OP == 1
    return old + u;
#elif OP == 2
    return old * u;
#elif OP == 3
    return u > old ? u : old;
#elif OP == 4
    return u < old ? u : old;
#else
    return u;
#endif
}

// An index of an axis of size dim, negative counting from the end; -1 when out of range.
inline long in_range(long j, const long dim) {
    if (j < 0) j += dim;
    return (j < 0 || j >= dim) ? -1 : j;
}

__kernel void copy(__global const ELEM* x, __global ELEM* y, const long n) {
    const long g = get_global_id(0);
    if (g < n) y[g] = x[g];
}

// ScatterElements: meta[0..5] the indices (= updates) shape padded in front with 1s, meta[6..11]
// the output's element strides along those axes, meta[12] the padded axis, meta[13] its size in
// the output. One work-item per line of the indices along the axis (lines = n / meta[axis]).
__kernel void scatter_elements(__global const I* idx, __global const ELEM* updates, __global ELEM* y,
                               __global const int* meta, const long lines) {
    const long g = get_global_id(0);
    if (g >= lines) return;
    const int axis = meta[12];
    const long dim = (long)meta[13];
    long rem = g, at = 0, off = 0, stride = 1, step = 1;
    for (int d = 5; d >= 0; --d) {
        const long s = (long)meta[d];
        if (d == axis) {
            step = stride;  // the element stride of the axis in the indices
        } else {
            const long c = rem % s;
            rem /= s;
            at += c * stride;
            off += c * (long)meta[6 + d];
        }
        stride *= s;
    }
    const long L = (long)meta[axis];
    for (long j = 0; j < L; ++j) {
        const long u = at + j * step;
        const long k = in_range((long)idx[u], dim);
        if (k < 0) continue;
        const long o = off + k * (long)meta[6 + axis];
        ST(y, o, combine(LD(y, o), LD(updates, u)));
    }
}

// ScatterND: indices as [M, K], each row the first K coordinates of a slice of S elements;
// updates as [M, S]; meta[0..K-1] the output's first K dims, meta[K..2K-1] their element strides.
// One work-item per position s within a slice applies the M updates in order.
__kernel void scatter_nd(__global const I* idx, __global const ELEM* updates, __global ELEM* y,
                         __global const int* meta, const long M, const int K, const long S) {
    const long s = get_global_id(0);
    if (s >= S) return;
    for (long m = 0; m < M; ++m) {
        long off = 0;
        for (int d = 0; d < K && off >= 0; ++d) {
            const long k = in_range((long)idx[m * K + d], (long)meta[d]);
            off = k < 0 ? -1 : off + k * (long)meta[K + d];
        }
        if (off < 0) continue;
        ST(y, off + s, combine(LD(y, off + s), LD(updates, m * S + s)));
    }
}

// GatherND: indices as [B, M, K] (B the batch_dims extent), data as [B, X] with each index row
// the first K coordinates of a slice of S elements within a batch of X; y as [B, M, S].
// meta[0..K-1] the K dims of data after the batch dims, meta[K..2K-1] their element strides
// within a batch. An out-of-range index writes 0 and reads nothing.
__kernel void gather_nd(__global const ELEM* x, __global const I* idx, __global ELEM* y,
                        __global const int* meta, const long M, const int K, const long S, const long X,
                        const long n) {
    const long g = get_global_id(0);
    if (g >= n) return;
    const long s = g % S;
    const long row = g / S;
    long off = (row / M) * X;
    for (int d = 0; d < K; ++d) {
        const long k = in_range((long)idx[row * K + d], (long)meta[d]);
        if (k < 0) {
            y[g] = (ELEM)0;
            return;
        }
        off += k * (long)meta[K + d];
    }
    y[g] = x[off + s];
}
