// im2col of one image and one group, float32 values (stype), up to 3 spatial dims (1-D / 2-D as 3-D with size-1
// leading dims). X + x_off: cg channels of ID x IH x IW. Col: [cg*KD*KH*KW, OD*OH*OW] row-major,
// row (c, kd, kh, kw), column (od, oh, ow); taps falling in the padding are 0. The conv is then
// the GEMM W_g [M/G, cg*KD*KH*KW] x Col.
__kernel void im2col(__global const stype* X, const long x_off, __global stype* Col, const int cg,
                     CONV_GEOMETRY)
{
    const size_t gid = get_global_id(0);
    const size_t P = (size_t)OD * OH * OW;
    if (gid >= (size_t)cg * KD * KH * KW * P) return;
    const size_t p = gid % P;
    const size_t r = gid / P;
    const int ow = (int)(p % OW);
    const int oh = (int)((p / OW) % OH);
    const int od = (int)(p / ((size_t)OW * OH));
    const int kw = (int)(r % KW);
    const int kh = (int)((r / KW) % KH);
    const int kd = (int)((r / ((size_t)KW * KH)) % KD);
    const int c = (int)(r / ((size_t)KW * KH * KD));
    const int id = od * SD - PD + kd * DD;
    const int ih = oh * SH - PH + kh * DH;
    const int iw = ow * SW - PW + kw * DW;
    float v = 0.0f;
    if (id >= 0 && id < ID && ih >= 0 && ih < IH && iw >= 0 && iw < IW)
        v = LOADF(X, x_off + (((size_t)c * ID + id) * IH + ih) * IW + iw);
    STOREF(Col, gid, v);
}

// im2col straight into the packed GEMM's B panels (matmul.cl's gemm_pack_b layout, float32):
// Bp[(q*K + k)*16 + j] = Col(k, q*16 + j), zero past the P = OD*OH*OW columns, K = cg*KD*KH*KW.
// One pass over the columns instead of im2col then gemm_pack_b. A work-item copies one input
// row shifted by its tap into one output row (od, oh) of one column-matrix row k: a run of OW
// reads, written in runs of up to 16 floats; the last output row also zeroes the panel's tail.
// On PoCL (2 cores) 2-4x faster than a work-item per (k, panel) stepping through 16 positions
// (DenseNet's 3x3 128-channel conv on 56x56: 8 against 17 ms) and 7-15x faster than plain im2col
// (one work-item per element, which divides its index apart).
// Launch: global (K, OD*OH).
__kernel void im2col_packed(__global const stype* X, const long x_off, __global float* Bp, const int cg,
                            CONV_GEOMETRY)
{
    const int k = get_global_id(0), r = get_global_id(1);
    const int K = cg * KD * KH * KW;
    if (k >= K || r >= OD * OH) return;
    const int kw = k % KW, kh = (k / KW) % KH, kd = (k / (KW * KH)) % KD, c = k / (KW * KH * KD);
    const int oh = r % OH, od = r / OH;
    const int id = od * SD - PD + kd * DD;
    const int ih = oh * SH - PH + kh * DH;
    const int inside = id >= 0 && id < ID && ih >= 0 && ih < IH;
    __global const stype* xr = X + x_off + (inside ? (((size_t)c * ID + id) * IH + ih) * IW : 0);
    int p = r * OW;
    for (int ow = 0; ow < OW; ++ow, ++p) {
        const int iw = ow * SW - PW + kw * DW;
        Bp[((size_t)(p >> 4) * K + k) * 16 + (p & 15)] = inside && iw >= 0 && iw < IW ? LOADF(xr, iw) : 0.0f;
    }
    if (r == OD * OH - 1)
        for (; p & 15; ++p) Bp[((size_t)(p >> 4) * K + k) * 16 + (p & 15)] = 0.0f;
}
