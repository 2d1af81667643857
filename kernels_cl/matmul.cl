// Tiled C = alpha * op(A) @ op(B) + beta * bias, float32, for MatMul and Gemm.
// A element (m, k) lives at A[a_off + m*sam + k*sak], B element (k, n) at B[b_off + k*sbk + n*sbn]:
// strides express transA / transB and batch offsets. C is row-major M x N at c_off.
// bias element (m, n) is bias[m*scm + n*scn] (strides 0 where it broadcasts); has_bias = 0: no bias.
// Launch: local (TS, TS), global (round_up(N, TS), round_up(M, TS)).
#ifndef TS
#define TS 16
#endif

__kernel void gemm(const int M, const int N, const int K,
                   __global const float* A, const int a_off, const int sam, const int sak,
                   __global const float* B, const int b_off, const int sbk, const int sbn,
                   __global float* C, const int c_off,
                   __global const float* bias, const int has_bias, const int scm, const int scn,
                   const float alpha, const float beta)
{
    __local float As[TS][TS];
    __local float Bs[TS][TS];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int col = get_group_id(0) * TS + tx;
    const int row = get_group_id(1) * TS + ty;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TS) {
        const int ka = t + tx, kb = t + ty;
        As[ty][tx] = (row < M && ka < K) ? A[a_off + row * sam + ka * sak] : 0.0f;
        Bs[ty][tx] = (kb < K && col < N) ? B[b_off + kb * sbk + col * sbn] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TS; ++k) acc += As[ty][k] * Bs[k][tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < M && col < N) {
        float r = alpha * acc;
        if (has_bias) r += beta * bias[row * scm + col * scn];
        C[c_off + row * N + col] = r;
    }
}
