// TopK along one axis: x viewed as [outer, L, inner], values / indices as [outer, k, inner].
// One work-item per input element counts the elements of its line that come before it in the
// order (largest: greater values first; otherwise smaller first; equal values by lower index, as
// ONNX asks) and, when that rank is below k, writes itself there. NaN sorts as the greatest value,
// NaNs as equals (the ONNX reference's lexsort). -DT=float|int|long|uint|ulong ..., -DIS_FLOAT=1
// for float32 (stored as stype).
#ifndef T
#define T float
#endif
#ifndef IS_FLOAT
#define IS_FLOAT 1
#endif

#if IS_FLOAT
#define ELEM stype
#define VAL float
#define LD(p, i) LOADF(p, i)
#define ST(p, i, v) STOREF(p, i, v)
#define GREATER(a, b) ((isnan(a) && !isnan(b)) || (a) > (b))
#define EQUAL(a, b) ((isnan(a) && isnan(b)) || (a) == (b))
#else
#define ELEM T
#define VAL T
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (v))
#define GREATER(a, b) ((a) > (b))
#define EQUAL(a, b) ((a) == (b))
#endif

__kernel void top_k(__global const ELEM* x, __global ELEM* values, __global long* indices, const long outer,
                    const long L, const long inner, const long k, const int largest) {
    const long g = get_global_id(0);
    if (g >= outer * L * inner) return;
    const long i = g % inner;
    const long e = (g / inner) % L;
    const long o = g / (inner * L);
    const long base = o * L * inner + i;
    const VAL v = LD(x, base + e * inner);
    long rank = 0;
    for (long j = 0; j < L && rank < k; ++j) {
        const VAL u = LD(x, base + j * inner);
        const int first = largest ? GREATER(u, v) : GREATER(v, u);
        if (first || (j < e && EQUAL(u, v))) ++rank;
    }
    if (rank >= k) return;
    const long at = (o * k + rank) * inner + i;
    ST(values, at, v);
    indices[at] = e;
}
