// Convolution kernels, NC + up to 3 spatial dims, float32 values (stored as stype, see common.h). 1-D and 2-D convs arrive as 3-D ones
// with leading spatial dims of size 1 (kernel 1, stride 1, pad 0, dilation 1).
// X: N x C x ID x IH x IW; pads are the begin pads (the end pads follow from the output shape).

// The taps of one output (od, oh, ow) of the kernel window at wp over the input plane at xp,
// summed into acc in the order (kd, kh, kw), skipping padding: conv_direct and
// conv_depthwise_rows both sum this way, so they agree bit for bit.
#define CONV_TAPS(acc, xp, wp, od, oh, ow)                                              \
    for (int kd = 0; kd < KD; ++kd) {                                                   \
        const int id = (od) * SD - PD + kd * DD;                                        \
        if (id < 0 || id >= ID) continue;                                               \
        for (int kh = 0; kh < KH; ++kh) {                                               \
            const int ih = (oh) * SH - PH + kh * DH;                                    \
            if (ih < 0 || ih >= IH) continue;                                           \
            __global const stype* xr = (xp) + ((size_t)id * IH + ih) * IW;              \
            __global const stype* wr = (wp) + (kd * KH + kh) * KW;                      \
            for (int kw = 0; kw < KW; ++kw) {                                           \
                const int iw = (ow) * SW - PW + kw * DW;                                \
                if (iw < 0 || iw >= IW) continue;                                       \
                acc += LOADF(xr, iw) * LOADF(wr, kw);                                   \
            }                                                                           \
        }                                                                               \
    }

// The channel of X that channel ch of a Conv's input is read from: X's channels as S groups of C/S,
// shuffled (ShuffleNet's Reshape [S, C/S], Transpose, Reshape, folded into the Conv: gpu/shuffle.py);
// S == 1: ch itself.
inline int shuffled_channel(const int ch, const int C, const int S)
{
    return S > 1 ? (ch % S) * (C / S) + ch / S : ch;
}

// Direct Conv: one work-item per output element. Wt: M x (C/G) x KD x KH x KW; B: M; epilogue: bit 0
// adds B, bit 2 then adds what Y holds (a residual Add written in place), bit 1 then applies Relu
// (conv_epilogue, matmul.cl's order); Y: N x M x OD x OH x OW; S: X's channels read shuffled in S
// groups (shuffled_channel; 1: as they are). Used for depthwise (C/G == 1) and tiny convs.
inline float conv_epilogue(float acc, __global const stype* B, const int m, __global const stype* Y,
                           const size_t k, const int epilogue)
{
    if (epilogue & 1) acc += LOADF(B, m);
    if (epilogue & 4) acc += LOADF(Y, k);
    return (epilogue & 2) && acc < 0.0f ? 0.0f : acc;
}

__kernel void conv_direct(__global const stype* X, __global const stype* Wt, __global const stype* B,
                          __global stype* Y, const int epilogue,
                          const int N, const int C, const int M, const int G, const int S,
                          CONV_GEOMETRY)
{
    const size_t gid = get_global_id(0);
    const size_t P = (size_t)OD * OH * OW;
    if (gid >= (size_t)N * M * P) return;
    const int ow = (int)(gid % OW);
    const int oh = (int)((gid / OW) % OH);
    const int od = (int)((gid / ((size_t)OW * OH)) % OD);
    const size_t nm = gid / P;
    const int m = (int)(nm % M);
    const int n = (int)(nm / M);
    const int cg = C / G;
    const int g = m / (M / G);
    const size_t plane = (size_t)ID * IH * IW;
    const int ksize = KD * KH * KW;
    float acc = 0.0f;
    for (int c = 0; c < cg; ++c) {
        __global const stype* xp = X + ((size_t)n * C + shuffled_channel(g * cg + c, C, S)) * plane;
        __global const stype* wp = Wt + ((size_t)m * cg + c) * ksize;
        CONV_TAPS(acc, xp, wp, od, oh, ow);
    }
    STOREF(Y, gid, conv_epilogue(acc, B, m, Y, gid, epilogue));
}

// Depthwise Conv (C/G == 1) for a CPU device: a work-item per output row (n, m, od, oh) computes
// its OW outputs in turn, each summing its taps in conv_direct's order (kd, kh, kw), so the two
// agree bit for bit. Consecutive outputs read neighbouring inputs in one work-item, where a
// work-item per output made PoCL gather across work-items. S as for conv_direct. Launch: global
// (N * M * OD * OH).
__kernel void conv_depthwise_rows(__global const stype* X, __global const stype* Wt, __global const stype* B,
                                  __global stype* Y, const int epilogue,
                                  const int N, const int C, const int M, const int G, const int S,
                                  CONV_GEOMETRY)
{
    const int r = get_global_id(0);
    if (r >= N * M * OD * OH) return;
    const int oh = r % OH, od = (r / OH) % OD;
    const int nm = r / (OH * OD);
    const int m = nm % M, n = nm / M;
    const int g = m / (M / G);
    const size_t plane = (size_t)ID * IH * IW;
    __global const stype* xp = X + ((size_t)n * C + shuffled_channel(g, C, S)) * plane;
    __global const stype* wp = Wt + (size_t)m * KD * KH * KW;
    __global stype* yp = Y + (size_t)r * OW;
    for (int ow = 0; ow < OW; ++ow) {
        float acc = 0.0f;
        CONV_TAPS(acc, xp, wp, od, oh, ow);
        STOREF(yp, ow, conv_epilogue(acc, B, m, yp, ow, epilogue));
    }
}

// Y[n, m, p] += B[m] over Y: N x M x P (the bias of a grouped conv run as per-group GEMMs), then
// Relu where epilogue's bit 1 says so. Launch: global (P, N * M): a row per (n, m), no 64-bit
// index division per element.
__kernel void add_bias(__global stype* Y, __global const stype* B, const int NM, const int M, const int P,
                       const int epilogue)
{
    const int p = get_global_id(0), r = get_global_id(1);
    if (p >= P || r >= NM) return;
    const size_t k = (size_t)r * P + p;
    STOREF(Y, k, conv_epilogue(LOADF(Y, k), B, r % M, Y, k, (epilogue & 2) | 1));
}

// Y[k] += R[k], then Relu where epilogue's bit 1 says so, over n elements: a Conv's fused residual
// Add where it cannot be written in place (ops/conv.py). Launch: global (n).
__kernel void add_residual(__global stype* Y, __global const stype* R, const long n, const int epilogue)
{
    const size_t k = get_global_id(0);
    if (k >= (size_t)n) return;
    const float v = LOADF(Y, k) + LOADF(R, k);
    STOREF(Y, k, (epilogue & 2) && v < 0.0f ? 0.0f : v);
}

// ConvTranspose as a gather: each output element sums the inputs that scatter onto it.
// Wt: C x (M/G) x KD x KH x KW; Y: N x M x OD x OH x OW; input position i feeds output
// o = i * S - P + k * Dil, so o contributes from i = (o + P - k * Dil) / S when that divides.
__kernel void conv_transpose(__global const stype* X, __global const stype* Wt, __global const stype* B,
                             __global stype* Y, const int has_bias,
                             const int N, const int C, const int M, const int G,
                             CONV_GEOMETRY)
{
    const size_t gid = get_global_id(0);
    const size_t P = (size_t)OD * OH * OW;
    if (gid >= (size_t)N * M * P) return;
    const int ow = (int)(gid % OW);
    const int oh = (int)((gid / OW) % OH);
    const int od = (int)((gid / ((size_t)OW * OH)) % OD);
    const size_t nm = gid / P;
    const int m = (int)(nm % M);
    const int n = (int)(nm / M);
    const int cg = C / G, mg = M / G;
    const int g = m / mg, mo = m % mg;
    const size_t plane = (size_t)ID * IH * IW;
    const int ksize = KD * KH * KW;
    float acc = 0.0f;
    for (int kd = 0; kd < KD; ++kd) {
        const int td = od + PD - kd * DD;
        if (td < 0 || td % SD != 0 || td / SD >= ID) continue;
        for (int kh = 0; kh < KH; ++kh) {
            const int th = oh + PH - kh * DH;
            if (th < 0 || th % SH != 0 || th / SH >= IH) continue;
            for (int kw = 0; kw < KW; ++kw) {
                const int tw = ow + PW - kw * DW;
                if (tw < 0 || tw % SW != 0 || tw / SW >= IW) continue;
                const size_t xo = ((size_t)(td / SD) * IH + th / SH) * IW + tw / SW;
                const int ko = (kd * KH + kh) * KW + kw;
                for (int c = 0; c < cg; ++c) {
                    const size_t ci = (size_t)g * cg + c;
                    acc += LOADF(X, ((size_t)n * C + ci) * plane + xo) * LOADF(Wt, (ci * mg + mo) * ksize + ko);
                }
            }
        }
    }
    STOREF(Y, gid, has_bias ? acc + LOADF(B, m) : acc);
}
