// Data-movement kernels: one strided copy (Transpose, Slice, Split, Expand, Tile, DepthToSpace,
// SpaceToDepth) and Concat (one copy per input).
// Element type T (-DT=float, int, long, uchar ...): these kernels only move bytes (float32 stored
// as half, precision=fp16, moves as ushort: its bits unchanged).
#ifndef T
#define T float
#endif

// y[j0..j5] = x[offset + sum_d (j_d % wrap_d) * stride_d], output rank <= 6 padded in front.
// meta[0..5]: the output shape (1 for padding); meta[6..11]: the input element stride read along
// each output axis (negative for a reversed Slice, 0 for a broadcast axis or padding);
// meta[12..17]: the wrap of each axis (Tile's input size; the output size where nothing wraps);
// meta[18]: the input element offset of y[0].
// -DRANK=<r>: only the last r axes are not padding (the launcher merges axes read as one), so
// the loop runs r times; -DNO_WRAP: no axis wraps. The index is split with int divisions (the
// output has fewer than 2^31 elements): 64-bit ones cost several times more on x86.
#ifndef RANK
#define RANK 6
#endif
__kernel void strided_copy(__global const T* x, __global T* y, __global const int* meta, const long n) {
    const long gid = (long)get_global_id(0);
    if (gid >= n) return;
    int rem = (int)gid;
    long off = (long)meta[18];
    for (int d = 5; d >= 6 - RANK; --d) {
        const int s = meta[d];
        const int j = rem % s;
        rem /= s;
#ifdef NO_WRAP
        off += (long)j * meta[6 + d];
#else
        off += (long)(j % meta[12 + d]) * meta[6 + d];
#endif
    }
    y[gid] = x[off];
}

// Copies one Concat input, viewed as [outer, chunk], into the output viewed as [outer, out_chunk]
// at column `offset`.
__kernel void concat_copy(__global const T* x, __global T* y, const long chunk, const long out_chunk,
                          const long offset, const long n) {
    const long gid = (long)get_global_id(0);
    if (gid >= n) return;
    const long o = gid / chunk;
    const long r = gid - o * chunk;
    y[o * out_chunk + offset + r] = x[gid];
}
