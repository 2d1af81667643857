// C = alpha * op(A) @ op(B) + beta * bias, float32 values (stored as stype, see common.h), for MatMul, Gemm and the GEMM part of Conv.
// A element (m, k) lives at A[a_off + m*sam + k*sak], B element (k, n) at B[b_off + k*sbk + n*sbn]:
// strides express transA / transB and batch offsets. C is row-major M x N at c_off.
// A launch runs a batch of such GEMMs along global dimension 2 (a grouped Conv's groups): GEMM t
// reads A from a_off + t*sab, B from b_off + t*sbb, the bias from t*sbias and writes C at
// c_off + t*scb (GEMM_BATCH; the packed kernels' panels follow one another per batch).
// bias element (m, n) is bias[m*scm + n*scn] (strides 0 where it broadcasts). epilogue: bit 0 adds the
// bias, bit 2 then adds what C holds (a Conv's fused residual Add, written in place), bit 1 then
// applies Relu (a Conv's fused activation, as elementwise Relu: x < 0 ? 0 : x).
// Every variant sums k = 0, 1, ..., K-1 in order into one float per output, so they agree.

#define GEMM_ARGS const int M, const int N, const int K, \
    __global const stype* A, const int a_off0, const int sam, const int sak, \
    __global const stype* B, const int b_off0, const int sbk, const int sbn, \
    __global stype* C, const int c_off0, \
    __global const stype* bias, const int epilogue, const int scm, const int scn, \
    const float alpha, const float beta, const int sab, const int sbb, const int scb, const int sbias

// The offsets of this work-item's GEMM of the batch (GEMM_ARGS), by global dimension 2.
#define GEMM_BATCH                                                  \
    const int batch_ = (int)get_global_id(2);                       \
    const int a_off = a_off0 + batch_ * sab, b_off = b_off0 + batch_ * sbb; \
    const int c_off = c_off0 + batch_ * scb, bias_off = batch_ * sbias;

inline void gemm_store(__global stype* C, const int c_off, const int N, const int row, const int col,
                       const float acc, __global const stype* bias, const int bias_off, const int epilogue,
                       const int scm, const int scn, const float alpha, const float beta) {
    float r = alpha * acc;
    if (epilogue & 1) r += beta * LOADF(bias, bias_off + row * scm + col * scn);
    if (epilogue & 4) r += LOADF(C, c_off + row * N + col);
    if (epilogue & 2) r = r < 0.0f ? 0.0f : r;
    STOREF(C, c_off + row * N + col, r);
}

// One work-item per output element, no local memory: for few rows (GEMV-like shapes), where
// tiles would idle. Launch: global (N, M, batch).
__kernel void gemm_naive(GEMM_ARGS) {
    GEMM_BATCH
    const int col = get_global_id(0), row = get_global_id(1);
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += LOADF(A, a_off + row * sam + k * sak) * LOADF(B, b_off + k * sbk + col * sbn);
    gemm_store(C, c_off, N, row, col, acc, bias, bias_off, epilogue, scm, scn, alpha, beta);
}

#ifndef TS
#define TS 16
#endif

// Square TS x TS tiles of A and B in local memory, one output per work-item.
// Launch: local (TS, TS, 1), global (round_up(N, TS), round_up(M, TS), batch).
__kernel void gemm(GEMM_ARGS) {
    GEMM_BATCH
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
    if (row < M && col < N) gemm_store(C, c_off, N, row, col, acc, bias, bias_off, epilogue, scm, scn, alpha, beta);
}

// Register blocking: a work-group of 16 x 16 work-items computes a BM x BN block of C, each
// work-item a WPT x WPT sub-block (rows ty + 16 i, columns tx + 16 j), from K-slices of 16 held
// in local memory; each loaded value is reused WPT times from registers. WPT (-DWPT=4 or 8)
// sets the block: 64 x 64 or 128 x 128 (conv_gemm also takes -DWPT=1: 16 x 16).
// Launch: local (16, 16, 1), global (round_up(N, BN) / WPT, round_up(M, BM) / WPT, batch).
#ifndef WPT
#define WPT 4
#endif
#define RTS 16
#define BM (RTS * WPT)
#define BN (RTS * WPT)
#define BK 16
// The work-item's WPT x WPT accumulators of a blocked kernel, zeroed.
#define BLOCKED_ACC                                   \
    float acc[WPT][WPT];                              \
    for (int i = 0; i < WPT; ++i)                     \
        for (int j = 0; j < WPT; ++j) acc[i][j] = 0.0f;
// One K-slice of BK from the tiles As and Bs into acc, k in order.
#define BLOCKED_SLICE                                                           \
    for (int k = 0; k < BK; ++k) {                                              \
        float a[WPT], b[WPT];                                                   \
        for (int i = 0; i < WPT; ++i) a[i] = As[k][ty + i * RTS];               \
        for (int j = 0; j < WPT; ++j) b[j] = Bs[k][tx + j * RTS];               \
        for (int i = 0; i < WPT; ++i)                                           \
            for (int j = 0; j < WPT; ++j) acc[i][j] += a[i] * b[j];             \
    }
// The block's outputs inside M x N through gemm_store (C row-major, N columns, at c_off).
#define BLOCKED_STORE(C, c_off, bias, bias_off, epilogue, scm, scn, alpha, beta)                     \
    for (int i = 0; i < WPT; ++i) {                                                                  \
        const int row = row0 + ty + i * RTS;                                                         \
        for (int j = 0; j < WPT; ++j) {                                                              \
            const int col = col0 + tx + j * RTS;                                                     \
            if (row < M && col < N)                                                                  \
                gemm_store(C, c_off, N, row, col, acc[i][j], bias, bias_off, epilogue, scm, scn, alpha, beta); \
        }                                                                                            \
    }

__kernel void gemm_blocked(GEMM_ARGS) {
    GEMM_BATCH
    __local float As[BK][BM];
    __local float Bs[BK][BN];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int tid = ty * RTS + tx;
    const int row0 = get_group_id(1) * BM, col0 = get_group_id(0) * BN;
    BLOCKED_ACC
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
        BLOCKED_SLICE
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    BLOCKED_STORE(C, c_off, bias, bias_off, epilogue, scm, scn, alpha, beta)
}

// Conv as an implicit GEMM: per image n and group g (global dimension 2: n * G + g), the GEMM
// Y_g = W_g [M/G, K] x Col [K, P] of im2col.cl's column matrix (K = C/G * KD*KH*KW rows (c, kd, kh,
// kw), P = OD*OH*OW columns (od, oh, ow), 0 where a tap falls in the padding), whose elements the
// B tile loads gather straight from X: no column buffer, one launch for every image and group.
// Tiles, loaded values and the k order are gemm_blocked's, so the result is bit for bit that of
// im2col then gemm_blocked. X: N x C x ID x IH x IW; Wt: M x C/G x KD x KH x KW; bias: M; output
// image n at Y + y_off + n * y_image (y_image = M * P, or a Concat's image), row m, column p at
// m * P + p. epilogue: gemm_store's bits (bias, then what Y holds, then Relu).
// Launch: local (16, 16, 1), global (round_up(P, BN) / WPT, round_up(M/G, BM) / WPT, N * G).
__kernel void conv_gemm(__global const stype* X, __global const stype* Wt, __global const stype* bias,
                        __global stype* Y, const int epilogue, const int y_off, const int y_image,
                        const int C, const int G, const int Mg, CONV_GEOMETRY) {
    const int z = get_global_id(2), n = z / G, g = z % G;
    const int cg = C / G, M = Mg, N = OD * OH * OW, K = cg * KD * KH * KW;
    const size_t plane = (size_t)ID * IH * IW;
    __global const stype* x = X + ((size_t)n * C + (size_t)g * cg) * plane;
    __global const stype* w = Wt + (size_t)g * Mg * K;
    const int c_off = y_off + n * y_image + g * Mg * N, bias_off = g * Mg;
    __local float As[BK][BM];
    __local float Bs[BK][BN];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int tid = ty * RTS + tx;
    const int row0 = get_group_id(1) * BM, col0 = get_group_id(0) * BN;
    // A work-item loads one column of each B tile (RTS * RTS is a multiple of BN): its output
    // position, and where its window starts in X, are the same for every K-slice.
    const int bn = tid % BN, gc = col0 + bn;
    const int ow = gc % OW, oh = (gc / OW) % OH, od = gc / (OW * OH);
    const int id0 = od * SD - PD, ih0 = oh * SH - PH, iw0 = ow * SW - PW;
    BLOCKED_ACC
    for (int t = 0; t < K; t += BK) {
        for (int l = tid; l < BK * BM; l += RTS * RTS) {
            const int k = l % BK, m = l / BK;
            const int gr = row0 + m, gk = t + k;
            As[k][m] = (gr < M && gk < K) ? LOADF(w, (size_t)gr * K + gk) : 0.0f;
        }
        for (int k = tid / BN; k < BK; k += RTS * RTS / BN) {
            const int gk = t + k;
            float v = 0.0f;
            if (gc < N && gk < K) {
                const int kw = gk % KW, kh = (gk / KW) % KH, kd = (gk / (KW * KH)) % KD, c = gk / (KW * KH * KD);
                const int id = id0 + kd * DD, ih = ih0 + kh * DH, iw = iw0 + kw * DW;
                if (id >= 0 && id < ID && ih >= 0 && ih < IH && iw >= 0 && iw < IW)
                    v = LOADF(x, c * plane + ((size_t)id * IH + ih) * IW + iw);
            }
            Bs[k][bn] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        BLOCKED_SLICE
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    BLOCKED_STORE(Y, c_off, bias, bias_off, epilogue, 1, 0, 1.0f, 1.0f)
}

// For a CPU device (PoCL): A and B packed into panels, then one work-item per RM x 16 block of
// C whose accumulators are 2 * RM float8 registers (RM = 6: 12 of AVX2's 16, with the two B
// vectors and the broadcast A value). Each k step reads RM floats of A and 16 of B, contiguous in
// the packed panels; unpacked, B's rows would be N floats apart, a cache set and a page per k.
// The accumulators are named variables, not arrays: PoCL's LLVM keeps an array of vectors on the
// stack even when unrolled. Packed loads are pointer casts, not vload8, which PoCL calls
// out-of-line (the call clobbers every vector register). Each output still sums k = 0 .. K-1 in
// order in one float (a float8 lane), as the other variants do.
// RM = 1 is the GEMV of a single row (fully connected layers at batch 1): 2 FMAs per 16 floats of
// B read, where RM = 6 would compute 5 rows of zeros.
// Launch: gemm_pack_a global (ceil(K / PACK_K), ceil(M / RM), batch), gemm_pack_b global
// (K, ceil(N / 16), batch), gemm_packed global (ceil(N / 16), ceil(M / RM), batch), local (1, 1, 1).
// The panels of GEMM t of a batch follow those of GEMM t - 1 (A_PANELS, B_PANELS floats each).
#define A_PANELS ((size_t)((M + RM - 1) / RM) * K * RM)
#define B_PANELS ((size_t)((N + NR - 1) / NR) * K * NR)
#ifndef RM
#define RM 6
#endif
#define NR 16
#if RM == 1
#define ROWS(X) X(0)
#elif RM == 4
#define ROWS(X) X(0) X(1) X(2) X(3)
#elif RM == 6
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#else
#error "RM is 1, 4 or 6"
#endif

// Ap[(p*K + k)*RM + i] = A(p*RM + i, k), zero past row M: each row panel is K steps of RM floats.
// A work-item copies PACK_K steps: RM row streams in, one stream out (one step per work-item
// made PoCL gather and scatter across work-items, 8x slower).
#define PACK_K 64
__kernel void gemm_pack_a(const int M, const int K, __global const stype* A, const int a_off0,
                          const int sam, const int sak, __global float* Ap, const int sab) {
    const int k0 = get_global_id(0) * PACK_K, p = get_global_id(1), batch_ = get_global_id(2);
    const int a_off = a_off0 + batch_ * sab;
    Ap += batch_ * A_PANELS;
    const int k1 = min(k0 + PACK_K, K);
    for (int k = k0; k < k1; ++k) {
        __global float* dst = Ap + ((size_t)p * K + k) * RM;
        for (int i = 0; i < RM; ++i) {
            const int row = p * RM + i;
            dst[i] = row < M ? LOADF(A, a_off + row * sam + k * sak) : 0.0f;
        }
    }
}

// Bp[(q*K + k)*NR + j] = B(k, q*NR + j), zero past column N: each column panel is K rows of 16.
__kernel void gemm_pack_b(const int N, const int K, __global const stype* B, const int b_off0,
                          const int sbk, const int sbn, __global float* Bp, const int sbb) {
    const int k = get_global_id(0), q = get_global_id(1), batch_ = get_global_id(2);
    const int b_off = b_off0 + batch_ * sbb;
    Bp += batch_ * B_PANELS;
    if (k >= K) return;
    __global float* dst = Bp + ((size_t)q * K + k) * NR;
    for (int j = 0; j < NR; ++j) {
        const int col = q * NR + j;
        dst[j] = col < N ? LOADF(B, b_off + k * sbk + col * sbn) : 0.0f;
    }
}

#define GEMM_ACC(i) float8 acc##i##a = (float8)(0.0f), acc##i##b = (float8)(0.0f);
#define GEMM_STEP(i) { const float x = a[k * RM + i]; acc##i##a += x * b0; acc##i##b += x * b1; }
#define GEMM_SPILL(i) *(float8*)(out + i * NR) = acc##i##a; *(float8*)(out + i * NR + 8) = acc##i##b;

__kernel void gemm_packed(const int M, const int N, const int K, __global const float* Ap,
                          __global const float* Bp, __global stype* C, const int c_off0,
                          __global const stype* bias, const int epilogue, const int scm, const int scn,
                          const float alpha, const float beta, const int scb, const int sbias) {
    // neighbouring work-groups share the A panel (RM * K floats, in L1), not the 16 * K of B:
    // 1.2-1.5x faster on PoCL at 1024³
    const int q = get_global_id(0), p = get_global_id(1), batch_ = get_global_id(2);
    const int c_off = c_off0 + batch_ * scb, bias_off = batch_ * sbias;
    Ap += batch_ * A_PANELS;
    Bp += batch_ * B_PANELS;
    const int row0 = p * RM, col0 = q * NR;
    if (row0 >= M || col0 >= N) return;
    __global const float* a = Ap + (size_t)p * K * RM;
    __global const float* b = Bp + (size_t)q * K * NR;
    ROWS(GEMM_ACC)
    for (int k = 0; k < K; ++k) {
        const float8 b0 = *(__global const float8*)(b + k * NR);
        const float8 b1 = *(__global const float8*)(b + k * NR + 8);
        ROWS(GEMM_STEP)
    }
    float out[RM * NR] __attribute__((aligned(32)));
    ROWS(GEMM_SPILL)
    for (int i = 0; i < RM; ++i) {
        const int row = row0 + i;
        for (int j = 0; j < NR; ++j) {
            const int col = col0 + j;
            if (row < M && col < N)
                gemm_store(C, c_off, N, row, col, out[i * NR + j], bias, bias_off, epilogue, scm, scn, alpha, beta);
        }
    }
}
