// 2-D max / average pooling, NCHW, float32: one work-item per output element.
// X: NC planes of H x W; Y: NC planes of OH x OW. Explicit pads (top, left), strides; no dilations.
// Average: count_include_pad = 1 divides by the window clipped to the padded extent
// (H + PT + PB, W + PL + PR), as ONNX does; 0 by the number of in-image elements.
__kernel void pool2d(__global const float* X, __global float* Y, const int is_max,
                     const int NC, const int H, const int W, const int OH, const int OW,
                     const int KH, const int KW, const int SH, const int SW,
                     const int PT, const int PL, const int PB, const int PR,
                     const int count_include_pad)
{
    const int gid = get_global_id(0);
    if (gid >= NC * OH * OW) return;
    const int ox = gid % OW;
    const int oy = (gid / OW) % OH;
    const int nc = gid / (OW * OH);
    __global const float* xp = X + (size_t)nc * H * W;
    const int y0 = oy * SH - PT, x0 = ox * SW - PL;
    float acc = is_max ? -INFINITY : 0.0f;
    int count = 0;
    for (int ky = 0; ky < KH; ++ky) {
        const int iy = y0 + ky;
        if (iy < 0 || iy >= H) continue;
        for (int kx = 0; kx < KW; ++kx) {
            const int ix = x0 + kx;
            if (ix < 0 || ix >= W) continue;
            const float v = xp[iy * W + ix];
            if (is_max) acc = (isnan(v) || v > acc) ? v : acc;
            else acc += v;
            ++count;
        }
    }
    if (!is_max) {
        if (count_include_pad) {
            const int ys = max(y0, -PT), ye = min(y0 + KH, H + PB);
            const int xs = max(x0, -PL), xe = min(x0 + KW, W + PR);
            count = (ye - ys) * (xe - xs);
        }
        acc = count > 0 ? acc / (float)count : 0.0f;
    }
    Y[gid] = acc;
}
