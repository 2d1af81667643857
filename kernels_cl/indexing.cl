// Indexing kernels: Gather, GatherElements (indices of type I) and Pad (four modes).
// Element type T (-DT=float, int, long, uchar ...; ushort for float32 stored as half: the bits
// move unchanged), index type I (-DI=int or long).
#ifndef T
#define T float
#endif
#ifndef I
#define I long
#endif

// Gather: x viewed as [outer, dim, inner], indices flattened to [count], y as [outer, count, inner].
// An index below -dim or at/above dim (onnxruntime rejects it at run time) reads nothing and
// writes 0, so a bad index never reads out of bounds.
__kernel void gather(__global const T* x, __global const I* idx, __global T* y, const long dim,
                     const long count, const long inner, const long n) {
    const long gid = (long)get_global_id(0);
    if (gid >= n) return;
    const long r = gid % inner;
    const long t = gid / inner;
    const long k = t % count;
    const long o = t / count;
    long j = (long)idx[k];
    if (j < 0) j += dim;
    y[gid] = (j < 0 || j >= dim) ? (T)0 : x[(o * dim + j) * inner + r];
}

// GatherElements: meta[0..5] the output (= indices) shape padded in front with 1s; meta[6..11]
// the element strides of x along those axes; meta[12] the padded gather axis, meta[13] its size
// in x. Out-of-range indices write 0, as in gather.
__kernel void gather_elements(__global const T* x, __global const I* idx, __global T* y,
                              __global const int* meta, const long n) {
    const long gid = (long)get_global_id(0);
    if (gid >= n) return;
    const int axis = meta[12];
    const long dim = (long)meta[13];
    long j = (long)idx[gid];
    if (j < 0) j += dim;
    if (j < 0 || j >= dim) {
        y[gid] = (T)0;
        return;
    }
    long rem = gid, off = 0;
    for (int d = 5; d >= 0; --d) {
        const long s = (long)meta[d];
        const long c = rem % s;
        rem /= s;
        off += (d == axis ? j : c) * (long)meta[6 + d];
    }
    y[gid] = x[off];
}

// Maps index i of an axis of size n that Pad reads past into [0, n), or -1 for the fill value.
// MODE 0 constant, 1 reflect (mirror without repeating the edge, numpy's "reflect"), 2 edge,
// 3 wrap.
inline long pad_index(long i, const long n) {
    if (i >= 0 && i < n) return i;
#if MODE == 0
    return -1;
#elif MODE == 1
    if (n == 1) return 0;
    const long period = 2 * (n - 1);
    i = i % period;
    if (i < 0) i += period;
    return i < n ? i : period - i;
#elif MODE == 2
    return i < 0 ? 0 : n - 1;
#else
    i = i % n;
    return i < 0 ? i + n : i;
#endif
}

// Pad: meta[0..5] the output shape, meta[6..11] the input shape, meta[12..17] the pads before
// each axis (negative crops), all padded in front (1, 1, 0). `value` holds the fill value of
// constant mode when has_value, else it is 0.
__kernel void pad(__global const T* x, __global T* y, __global const T* value, const int has_value,
                  __global const int* meta, const long n) {
    const long gid = (long)get_global_id(0);
    if (gid >= n) return;
    long rem = gid, off = 0, stride = 1;
    for (int d = 5; d >= 0; --d) {
        const long s = (long)meta[d];
        const long size = (long)meta[6 + d];
        const long i = pad_index(rem % s - (long)meta[12 + d], size);
        rem /= s;
        if (i < 0) {
            y[gid] = has_value ? value[0] : (T)0;
            return;
        }
        off += i * stride;
        stride *= size;
    }
    y[gid] = x[off];
}
