// C = alpha * op(A) @ op(B) + beta * bias, float32 values (stored as stype, see common.h), for MatMul, Gemm and the GEMM part of Conv.
// A element (m, k) lives at A[a_off + m*sam + k*sak], B element (k, n) at B[b_off + k*sbk + n*sbn]:
// strides express transA / transB and batch offsets. C is row-major M x N at c_off.
// bias element (m, n) is bias[m*scm + n*scn] (strides 0 where it broadcasts); has_bias = 0: no bias.
// Every variant sums k = 0, 1, ..., K-1 in order into one float per output, so they agree.

#define GEMM_ARGS const int M, const int N, const int K, \
    __global const stype* A, const int a_off, const int sam, const int sak, \
    __global const stype* B, const int b_off, const int sbk, const int sbn, \
    __global stype* C, const int c_off, \
    __global const stype* bias, const int has_bias, const int scm, const int scn, \
    const float alpha, const float beta

inline void gemm_store(__global stype* C, const int c_off, const int N, const int row, const int col,
                       const float acc, __global const stype* bias, const int has_bias,
                       const int scm, const int scn, const float alpha, const float beta) {
    float r = alpha * acc;
    if (has_bias) r += beta * LOADF(bias, row * scm + col * scn);
    STOREF(C, c_off + row * N + col, r);
}

// One work-item per output element, no local memory: for few rows (GEMV-like shapes), where
// tiles would idle. Launch: global (N, M).
__kernel void gemm_naive(GEMM_ARGS) {
    const int col = get_global_id(0), row = get_global_id(1);
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += LOADF(A, a_off + row * sam + k * sak) * LOADF(B, b_off + k * sbk + col * sbn);
    gemm_store(C, c_off, N, row, col, acc, bias, has_bias, scm, scn, alpha, beta);
}

#ifndef TS
#define TS 16
#endif

// Square TS x TS tiles of A and B in local memory, one output per work-item.
// Launch: local (TS, TS), global (round_up(N, TS), round_up(M, TS)).
__kernel void gemm(GEMM_ARGS) {
    __local float As[TS][TS];
    __local float Bs[TS][TS];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int col = get_group_id(0) * TS + tx;
    const int row = get_group_id(1) * TS + ty;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TS) {
        const int ka = t + tx, kb = t + ty;
        As[ty][tx] = (row < M && ka < K) ? LOADF(A, a_off + row * sam + ka * sak) : 0.0f;
        Bs[ty][tx] = (kb < K && col < N) ? LOADF(B, b_off + kb * sbk + col * sbn) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TS; ++k) acc += As[ty][k] * Bs[k][tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < M && col < N) gemm_store(C, c_off, N, row, col, acc, bias, has_bias, scm, scn, alpha, beta);
}

// Register blocking: a work-group of 16 x 16 work-items computes a BM x BN block of C, each
// work-item a WPT x WPT sub-block (rows ty + 16 i, columns tx + 16 j), from K-slices of 16 held
// in local memory; each loaded value is reused WPT times from registers. WPT (-DWPT=4 or 8)
// sets the block: 64 x 64 or 128 x 128.
// Launch: local (16, 16), global (round_up(N, BN) / WPT, round_up(M, BM) / WPT).
#ifndef WPT
#define WPT 4
#endif
#define RTS 16
#define BM (RTS * WPT)
#define BN (RTS * WPT)
#define BK 16
__kernel void gemm_blocked(GEMM_ARGS) {
    __local float As[BK][BM];
    __local float Bs[BK][BN];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int tid = ty * RTS + tx;
    const int row0 = get_group_id(1) * BM, col0 = get_group_id(0) * BN;
    float acc[WPT][WPT];
    for (int i = 0; i < WPT; ++i)
        for (int j = 0; j < WPT; ++j) acc[i][j] = 0.0f;
    for (int t = 0; t < K; t += BK) {
        for (int l = tid; l < BK * BM; l += RTS * RTS) {
            const int k = l % BK, m = l / BK;  // neighbours read along k: contiguous when sak = 1
            const int gr = row0 + m, gk = t + k;
            As[k][m] = (gr < M && gk < K) ? LOADF(A, a_off + gr * sam + gk * sak) : 0.0f;
        }
        for (int l = tid; l < BK * BN; l += RTS * RTS) {
            const int n = l % BN, k = l / BN;  // neighbours read along n: contiguous when sbn = 1
            const int gc = col0 + n, gk = t + k;
            Bs[k][n] = (gc < N && gk < K) ? LOADF(B, b_off + gk * sbk + gc * sbn) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < BK; ++k) {
            float a[WPT], b[WPT];
            for (int i = 0; i < WPT; ++i) a[i] = As[k][ty + i * RTS];
            for (int j = 0; j < WPT; ++j) b[j] = Bs[k][tx + j * RTS];
            for (int i = 0; i < WPT; ++i)
                for (int j = 0; j < WPT; ++j) acc[i][j] += a[i] * b[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < WPT; ++i) {
        const int row = row0 + ty + i * RTS;
        for (int j = 0; j < WPT; ++j) {
            const int col = col0 + tx + j * RTS;
            if (row < M && col < N) gemm_store(C, c_off, N, row, col, acc[i][j], bias, has_bias, scm, scn, alpha, beta);
        }
    }
}
