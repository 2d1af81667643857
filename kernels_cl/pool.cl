// Pooling, NC + up to 3 spatial dims, float32 values (stored as stype, see common.h) (1-D / 2-D as 3-D with size-1 leading dims).

// Max (mode 0), average (mode 1) or Lp (mode 2) pooling: one work-item per output element.
// X: NC planes of ID x IH x IW; Y: NC planes of OD x OH x OW. P* are the begin pads, E* the end
// pads, Dil* the dilations. Average: count_include_pad = 1 divides by the taps inside the padded
// extent [-P, I + E) (ceil_mode windows may reach past it), 0 by the taps inside the input.
// Max propagates NaN like numpy. Lp: (sum |x|^p)^(1/p), padding counting as 0.
// Built with -DPOOL_MODE=<mode> -DPOOL_KD=<KD> -DPOOL_KH=<KH> -DPOOL_KW=<KW> (what launchers pass)
// the mode and window are constants: the window loops unroll and the other modes' code goes.
// NaN is tested as v != v: PoCL's isnan is a call. On PoCL (2 cores, median of 15, 3x3/2 max
// pool of 64 x 111 x 111): 22.3 ms as it was, 12.0 with v != v, 9.6 with the constants too
// (480 x 28 x 28, 3x3/1 padded: 38.4, 24.3, 22.9).
#ifdef POOL_MODE
#define POOL_M(mode) POOL_MODE
#define POOL_D(KD) POOL_KD
#define POOL_H(KH) POOL_KH
#define POOL_W(KW) POOL_KW
#else
#define POOL_M(mode) (mode)
#define POOL_D(KD) (KD)
#define POOL_H(KH) (KH)
#define POOL_W(KW) (KW)
#endif
__kernel void pool(__global const stype* X, __global stype* Y, const int mode, const float p,
                   const int NC, const int ID, const int IH, const int IW,
                   const int KD, const int KH, const int KW,
                   const int OD, const int OH, const int OW,
                   const int SD, const int SH, const int SW,
                   const int PD, const int PH, const int PW,
                   const int ED, const int EH, const int EW,
                   const int DD, const int DH, const int DW,
                   const int count_include_pad)
{
    const size_t gid = get_global_id(0);
    const size_t P = (size_t)OD * OH * OW;
    if (gid >= (size_t)NC * P) return;
    const int ow = (int)(gid % OW);
    const int oh = (int)((gid / OW) % OH);
    const int od = (int)((gid / ((size_t)OW * OH)) % OD);
    __global const stype* xp = X + (gid / P) * ((size_t)ID * IH * IW);
    const int d0 = od * SD - PD, h0 = oh * SH - PH, w0 = ow * SW - PW;
    float acc = POOL_M(mode) == 0 ? -INFINITY : 0.0f;
    int count = 0, padded = 0;
    for (int kd = 0; kd < POOL_D(KD); ++kd) {
        const int id = d0 + kd * DD;
        if (id < -PD || id >= ID + ED) continue;
        for (int kh = 0; kh < POOL_H(KH); ++kh) {
            const int ih = h0 + kh * DH;
            if (ih < -PH || ih >= IH + EH) continue;
            for (int kw = 0; kw < POOL_W(KW); ++kw) {
                const int iw = w0 + kw * DW;
                if (iw < -PW || iw >= IW + EW) continue;
                ++padded;
                if (id < 0 || id >= ID || ih < 0 || ih >= IH || iw < 0 || iw >= IW) continue;
                const float v = LOADF(xp, ((size_t)id * IH + ih) * IW + iw);
                if (POOL_M(mode) == 0) acc = (v != v || v > acc) ? v : acc;
                else if (POOL_M(mode) == 1) acc += v;
                else acc += pow(fabs(v), p);
                ++count;
            }
        }
    }
    if (POOL_M(mode) == 1) {
        const int n = count_include_pad ? padded : count;
        acc = n > 0 ? acc / (float)n : NAN;
    } else if (POOL_M(mode) == 2) {
        acc = pow(acc, 1.0f / p);
    }
    STOREF(Y, gid, acc);
}

// GlobalMaxPool (is_max = 1) / GlobalAveragePool: one work-item per (n, c) plane of S elements.
__kernel void global_pool(__global const stype* X, __global stype* Y, const int is_max,
                          const int NC, const int S)
{
    const size_t gid = get_global_id(0);
    if (gid >= (size_t)NC) return;
    __global const stype* xp = X + gid * (size_t)S;
    float acc = is_max ? -INFINITY : 0.0f;
    for (int i = 0; i < S; ++i) {
        const float v = LOADF(xp, i);
        if (is_max) acc = (v != v || v > acc) ? v : acc;
        else acc += v;
    }
    STOREF(Y, gid, is_max ? acc : acc / (float)S);
}
