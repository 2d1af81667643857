// Storage conversions of mixed precision (precision=fp16 with values kept float32): a value stored
// as half read by a step that runs on float32 storage, and back. Built with -DOFFLOAD_FP16;
// half → float is exact, float → half rounds to nearest even (±inf past 65504), as STOREF does.

__kernel void to_float(__global const half* x, __global float* y, const long n) {
    const long i = (long)get_global_id(0);
    if (i < n) y[i] = vload_half((size_t)i, x);
}

__kernel void to_half(__global const float* x, __global half* y, const long n) {
    const long i = (long)get_global_id(0);
    if (i < n) vstore_half_rte(x[i], (size_t)i, y);
}
