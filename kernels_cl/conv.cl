// Direct 2-D convolution, NCHW, float32: one work-item per output element.
// X: N x C x H x W; Wt: M x (C/G) x KH x KW; B: M (has_bias = 0: none); Y: N x M x OH x OW.
// Explicit pads (top, left), strides, dilations; G groups (M and C divisible by G).
__kernel void conv2d(__global const float* X, __global const float* Wt, __global const float* B,
                     __global float* Y, const int has_bias,
                     const int N, const int C, const int H, const int W,
                     const int M, const int G, const int KH, const int KW,
                     const int OH, const int OW,
                     const int SH, const int SW, const int PT, const int PL,
                     const int DH, const int DW)
{
    const int gid = get_global_id(0);
    const int total = N * M * OH * OW;
    if (gid >= total) return;
    const int ox = gid % OW;
    const int oy = (gid / OW) % OH;
    const int m = (gid / (OW * OH)) % M;
    const int n = gid / (OW * OH * M);
    const int cg = C / G;
    const int g = m / (M / G);
    float acc = has_bias ? B[m] : 0.0f;
    for (int c = 0; c < cg; ++c) {
        const int ci = g * cg + c;
        __global const float* xp = X + ((size_t)n * C + ci) * H * W;
        __global const float* wp = Wt + ((size_t)m * cg + c) * KH * KW;
        for (int ky = 0; ky < KH; ++ky) {
            const int iy = oy * SH - PT + ky * DH;
            if (iy < 0 || iy >= H) continue;
            for (int kx = 0; kx < KW; ++kx) {
                const int ix = ox * SW - PL + kx * DW;
                if (ix < 0 || ix >= W) continue;
                acc += xp[iy * W + ix] * wp[ky * KW + kx];
            }
        }
    }
    Y[gid] = acc;
}
