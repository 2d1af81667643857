// Resize of float32 tensors (rank <= 6; stored as stype, see common.h): nearest or (multi)linear interpolation.
// Build options: -DCTM=<coordinate transformation> (0 half_pixel, 1 asymmetric, 2 align_corners,
// 3 pytorch_half_pixel), -DLINEAR=0/1, -DNEAREST=<nearest mode> (0 round_prefer_floor,
// 1 round_prefer_ceil, 2 floor, 3 ceil).
// The arithmetic is onnxruntime's, in float: the same coordinates round the same way.
#ifndef CTM
#define CTM 0
#endif
#ifndef LINEAR
#define LINEAR 0
#endif
#ifndef NEAREST
#define NEAREST 0
#endif

// The input coordinate output index j maps to on an axis of sizes n_in → n_out, scale s.
inline float source_coordinate(const long j, const long n_in, const long n_out, const float s) {
#if CTM == 0
    return ((float)j + 0.5f) / s - 0.5f;
#elif CTM == 1
    return (float)j / s;
#elif CTM == 2
    return n_out == 1 ? 0.0f : (float)j * (float)(n_in - 1) / (float)(n_out - 1);
#else
    return n_out > 1 ? ((float)j + 0.5f) / s - 0.5f : 0.0f;
#endif
}

inline long nearest_index(const float x, const long n_in) {
#if NEAREST == 0
    const float f = floor(x);
    long i = (long)(x == f + 0.5f ? f : round(x));
#elif NEAREST == 1
    long i = (long)round(x);
#elif NEAREST == 2
    long i = (long)floor(x);
#else
    long i = (long)ceil(x);
#endif
    return i < 0 ? 0 : (i >= n_in ? n_in - 1 : i);
}

// meta[0..5] the output shape, meta[6..11] the input shape, padded in front with 1s; s0..s5 the
// scale of each (padded) axis. With LINEAR, axes whose scale is 1 are copied, not interpolated.
__kernel void resize(__global const stype* x, __global stype* y, __global const int* meta,
                     const float s0, const float s1, const float s2, const float s3, const float s4,
                     const float s5, const long n) {
    const long gid = (long)get_global_id(0);
    if (gid >= n) return;
    float scale[6];
    scale[0] = s0; scale[1] = s1; scale[2] = s2; scale[3] = s3; scale[4] = s4; scale[5] = s5;
    long rem = gid, base = 0, stride = 1;
#if LINEAR
    long step[6];
    float frac[6];
    int na = 0;
#endif
    for (int d = 5; d >= 0; --d) {
        const long n_out = (long)meta[d];
        const long n_in = (long)meta[6 + d];
        const long j = rem % n_out;
        rem /= n_out;
        long i = j;
        if (scale[d] != 1.0f || n_in != n_out) {
            const float c = source_coordinate(j, n_in, n_out, scale[d]);
#if LINEAR
            const float cc = fmin(fmax(c, 0.0f), (float)(n_in - 1));
            i = (long)cc;
            if (i > n_in - 1) i = n_in - 1;
            if (i + 1 < n_in) {
                step[na] = stride;
                frac[na] = cc - (float)i;
                ++na;
            }
#else
            i = nearest_index(c, n_in);
#endif
        }
        base += i * stride;
        stride *= n_in;
    }
#if LINEAR
    float acc = 0.0f;
    for (int k = 0; k < (1 << na); ++k) {
        long off = base;
        float w = 1.0f;
        for (int a = 0; a < na; ++a) {
            if ((k >> a) & 1) {
                off += step[a];
                w *= frac[a];
            } else {
                w *= 1.0f - frac[a];
            }
        }
        acc += w * LOADF(x, off);
    }
    STOREF(y, gid, acc);
#else
    STOREF(y, gid, LOADF(x, base));
#endif
}
