// CumSum / CumProd along one axis: x viewed as [outer, L, inner], one work-item per (outer,
// inner) line adding (multiplying) its L elements in order, as numpy and onnxruntime do, so a
// float32 result matches theirs bit for bit. -DT=float|int|long|uint|ulong, -DIS_FLOAT=1 for
// float32 (stored as stype, accumulated in float), -DPROD=1 for CumProd.
#ifndef T
#define T float
#endif
#ifndef IS_FLOAT
#define IS_FLOAT 1
#endif
#ifndef PROD
#define PROD 0
#endif

#if IS_FLOAT
#define ELEM stype
#define ACC float
#define LD(p, i) LOADF(p, i)
#define ST(p, i, v) STOREF(p, i, v)
#else
#define ELEM T
#define ACC T
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (v))
#endif

__kernel void cumulate(__global const ELEM* x, __global ELEM* y, const int outer, const int L,
                       const int inner, const int exclusive, const int reverse) {
    const int g = get_global_id(0);
    if (g >= outer * inner) return;
    const long base = (long)(g / inner) * L * inner + g % inner;
    ACC acc = (ACC)PROD;  // the identity: 0 for a sum, 1 for a product
    for (int j = 0; j < L; ++j) {
        const long at = base + (long)(reverse ? L - 1 - j : j) * inner;
        const ACC v = LD(x, at);
        if (exclusive) ST(y, at, acc);
#if PROD
        acc = acc * v;
#else
        acc = acc + v;
#endif
        if (!exclusive) ST(y, at, acc);
    }
}

// Hardmax (float32): 1 at the first maximum of each line, 0 elsewhere; a NaN counts as the
// maximum (the first one wins), as numpy's argmax has it.
__kernel void hardmax(__global const stype* x, __global stype* y, const int outer, const int L,
                      const int inner) {
    const int g = get_global_id(0);
    if (g >= outer * inner || L == 0) return;
    const long base = (long)(g / inner) * L * inner + g % inner;
    int best = 0;
    float top = LOADF(x, base);
    for (int j = 1; j < L && !isnan(top); ++j) {
        const float v = LOADF(x, base + (long)j * inner);
        if (v > top || isnan(v)) {
            top = v;
            best = j;
        }
    }
    for (int j = 0; j < L; ++j) STOREF(y, base + (long)j * inner, j == best ? 1.0f : 0.0f);
}

// LpNormalization (float32): each line divided by its L1 (P=1) or L2 (P=2) norm, summed in
// order in float; a line of zeros stays zeros (the ONNX reference and onnxruntime, not 0/0).
__kernel void lp_normalize(__global const stype* x, __global stype* y, const int outer, const int L,
                           const int inner, const int p) {
    const int g = get_global_id(0);
    if (g >= outer * inner) return;
    const long base = (long)(g / inner) * L * inner + g % inner;
    float acc = 0.0f;
    for (int j = 0; j < L; ++j) {
        const float v = LOADF(x, base + (long)j * inner);
        acc += p == 1 ? fabs(v) : v * v;
    }
    const float norm = p == 1 ? acc : sqrt(acc);
    for (int j = 0; j < L; ++j) {
        const long at = base + (long)j * inner;
        STOREF(y, at, norm == 0.0f ? 0.0f : LOADF(x, at) / norm);
    }
}
