// Data-movement kernels: Transpose (any permutation, rank <= 6) and Concat (one copy per input).
// Element type T (-DT=float, int, long, uchar ...): these kernels only move bytes.
#ifndef T
#define T float
#endif

// meta[0..5]: the output shape, padded in front with 1s; meta[6..11]: for each output axis, the
// element stride of the input axis it reads (perm applied, 0 for padding).
__kernel void transpose(__global const T* x, __global T* y, __global const int* meta, const int n) {
    const int gid = get_global_id(0);
    if (gid >= n) return;
    int rem = gid, off = 0;
    for (int d = 5; d >= 0; --d) {
        const int s = meta[d];
        const int j = rem % s;
        rem /= s;
        off += j * meta[6 + d];
    }
    y[gid] = x[off];
}

// Copies one Concat input, viewed as [outer, chunk], into the output viewed as [outer, out_chunk]
// at column `offset`.
__kernel void concat_copy(__global const T* x, __global T* y, const int chunk, const int out_chunk,
                          const int offset, const int n) {
    const int gid = get_global_id(0);
    if (gid >= n) return;
    const int o = gid / chunk;
    const int r = gid - o * chunk;
    y[o * out_chunk + offset + r] = x[gid];
}
