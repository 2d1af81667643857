// Inference BatchNormalization and Softmax, float32.

// Y = (X - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c]; X is N x C x (inner), one work-item per element.
__kernel void batchnorm(__global const float* X, __global const float* scale, __global const float* bias,
                        __global const float* mean, __global const float* var, __global float* Y,
                        const int total, const int C, const int inner, const float eps)
{
    const int gid = get_global_id(0);
    if (gid >= total) return;
    const int c = (gid / inner) % C;
    Y[gid] = (X[gid] - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c];
}

// Softmax along an axis of extent L: X viewed as outer x L x inner; one work-item per (outer, inner) row.
__kernel void softmax(__global const float* X, __global float* Y, const int outer, const int L, const int inner)
{
    const int gid = get_global_id(0);
    if (gid >= outer * inner) return;
    const int o = gid / inner, i = gid % inner;
    const size_t base = (size_t)o * L * inner + i;
    float mx = -INFINITY;
    for (int k = 0; k < L; ++k) mx = fmax(mx, X[base + (size_t)k * inner]);
    float s = 0.0f;
    for (int k = 0; k < L; ++k) {
        const float e = exp(X[base + (size_t)k * inner] - mx);
        Y[base + (size_t)k * inner] = e;
        s += e;
    }
    for (int k = 0; k < L; ++k) Y[base + (size_t)k * inner] /= s;
}
