// OpenCL C 1.2 → CUDA C++: put before a kernels_cl source (or a generated kernel) so that NVRTC
// compiles it unchanged. Self-contained: NVRTC has no system headers.
//
// Covered: the address-space qualifiers, __kernel, inline helpers, the work-item functions
// (dims 0, 1, 2 = x, y, z), barrier, the OpenCL scalar type names, INFINITY / NAN, half storage
// (vload_half / vstore_half_rte), and the OpenCL builtins CUDA lacks. The float math builtins
// (exp, fmin, isnan, ...) need nothing: CUDA declares float overloads of them, so exp(float) runs
// expf as OpenCL's would. Of the vector types only float8, as a struct with the operations
// matmul.cl's CPU kernel uses (broadcast from a float, float * float8, +=, 32-byte aligned
// loads through a pointer cast); each lane is the scalar expression, so acc += x * b contracts to
// one fma per lane as the scalar kernels' does.
// Not covered: other vector types, vload / vstore, swizzles, images, select, convert_* / as_*,
// atomics, printf (kernels_cl does not use them). `long` is 64-bit as in OpenCL on every LP64
// host (Linux); NVRTC on Windows is LLP64, where `long` is 32-bit: the kernels would need
// `long long` there.
#ifndef OFFLOAD_CUDA_PRELUDE_H
#define OFFLOAD_CUDA_PRELUDE_H

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;

// Work-item functions. The global size is rounded up to whole blocks, so get_global_size may
// exceed the OpenCL global size: every kernel bound-checks its index against its own count.
__device__ __forceinline__ size_t get_local_id(uint d) {
    return d == 0 ? threadIdx.x : d == 1 ? threadIdx.y : d == 2 ? threadIdx.z : 0;
}
__device__ __forceinline__ size_t get_group_id(uint d) {
    return d == 0 ? blockIdx.x : d == 1 ? blockIdx.y : d == 2 ? blockIdx.z : 0;
}
__device__ __forceinline__ size_t get_local_size(uint d) {
    return d == 0 ? blockDim.x : d == 1 ? blockDim.y : d == 2 ? blockDim.z : 1;
}
__device__ __forceinline__ size_t get_num_groups(uint d) {
    return d == 0 ? gridDim.x : d == 1 ? gridDim.y : d == 2 ? gridDim.z : 1;
}
__device__ __forceinline__ size_t get_global_id(uint d) {
    return get_group_id(d) * get_local_size(d) + get_local_id(d);
}
__device__ __forceinline__ size_t get_global_size(uint d) {
    return get_num_groups(d) * get_local_size(d);
}

// barrier: __syncthreads also orders the block's global memory accesses, so it serves both fences.
#define CLK_LOCAL_MEM_FENCE 1
#define CLK_GLOBAL_MEM_FENCE 2
__device__ __forceinline__ void barrier(int) { __syncthreads(); }

#ifndef INFINITY
#define INFINITY (__int_as_float(0x7f800000))
#endif
#ifndef NAN
#define NAN (__int_as_float(0x7fffffff))
#endif
#ifndef MAXFLOAT
#define MAXFLOAT (3.402823466e+38f)
#endif

// OpenCL builtins with no CUDA namesake (float and double, as OpenCL overloads them).
// sign keeps the sign of a zero and gives 0 for NaN, as OpenCL's does.
__device__ __forceinline__ float sign(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x == x ? x : 0.0f; }
__device__ __forceinline__ double sign(double x) { return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : x == x ? x : 0.0; }
__device__ __forceinline__ float mix(float a, float b, float t) { return a + (b - a) * t; }
__device__ __forceinline__ double mix(double a, double b, double t) { return a + (b - a) * t; }
__device__ __forceinline__ float step(float edge, float x) { return x < edge ? 0.0f : 1.0f; }
__device__ __forceinline__ double step(double edge, double x) { return x < edge ? 0.0 : 1.0; }
__device__ __forceinline__ float degrees(float r) { return r * 57.295779513082320876798f; }
__device__ __forceinline__ float radians(float d) { return d * 0.017453292519943295769f; }

struct __align__(32) float8 {
    float s[8];
    __device__ __forceinline__ float8() {}
    __device__ __forceinline__ float8(float x) {
        for (int i = 0; i < 8; ++i) s[i] = x;
    }
};
__device__ __forceinline__ float8 operator*(float x, const float8& v) {
    float8 r;
    for (int i = 0; i < 8; ++i) r.s[i] = x * v.s[i];
    return r;
}
__device__ __forceinline__ float8& operator+=(float8& a, const float8& v) {
    for (int i = 0; i < 8; ++i) a.s[i] += v.s[i];
    return a;
}

// Half storage (common.h under OFFLOAD_FP16): `half` is only ever a buffer element here, so it
// is the 16 bits themselves (NVRTC has no cuda_fp16.h without headers), converted by the PTX
// instructions: cvt.f32.f16 is exact, cvt.rn.f16.f32 rounds to nearest even (IEEE, as OpenCL's
// vstore_half_rte), overflowing to infinity.
typedef unsigned short half;
__device__ __forceinline__ float vload_half(size_t i, const half* p) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i]));
    return f;
}
__device__ __forceinline__ void vstore_half_rte(float v, size_t i, half* p) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    p[i] = h;
}

// The OpenCL C keywords, defined last so that the definitions above stay plain CUDA.
#define __kernel extern "C" __global__
#define __global
#define __local __shared__
#define __constant const
#define __private
#define __read_only
#define __write_only
#define restrict __restrict__
#define inline __device__ inline

#endif
