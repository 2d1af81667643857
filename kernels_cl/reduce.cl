// Reductions over a set of axes (ReduceSum, ReduceMean, ReduceMax, ...) and ArgMax / ArgMin.
//
// Build options: -DT=<element type>, -DIS_FLOAT=0|1 (T is float; it must be given for any other T), -DOP=<code below>, -DWG=<work-group size,
// a power of two>. The input is read as [kept..., reduced...]: output element o (over the kept
// axes) reads X[kept_offset(o) + reduced_offset(r)] for r < R. meta holds four tables of six
// entries (padded in front): kept shape, kept strides, reduced shape, reduced strides.
// "contig" says the reduced axes are the trailing ones: the offsets are then o * R + r.
#ifndef T
#define T float
#endif
#ifndef IS_FLOAT
#define IS_FLOAT 1
#endif
#ifndef WG
#define WG 128
#endif
#ifndef OP
#define OP 0
#endif

// OP: 0 sum, 1 mean, 2 max, 3 min, 4 prod, 5 L1, 6 L2, 7 log-sum, 8 log-sum-exp, 9 sum-square.
#if IS_FLOAT
#define ACC float
#else
#define ACC T
#endif

// Buffers of float32 values are stype (half under OFFLOAD_FP16, see common.h); others are T.
#if IS_FLOAT
#define XT stype
#define LD(p, i) LOADF(p, i)
#define ST(p, i, v) STOREF(p, i, v)
#else
#define XT T
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (v))
#endif

#if OP == 2 && IS_FLOAT
#define COMB(a, b) ((isnan(a) || (a) > (b)) ? (a) : (b))
#elif OP == 2
#define COMB(a, b) ((a) > (b) ? (a) : (b))
#elif OP == 3 && IS_FLOAT
#define COMB(a, b) ((isnan(a) || (a) < (b)) ? (a) : (b))
#elif OP == 3
#define COMB(a, b) ((a) < (b) ? (a) : (b))
#elif OP == 4
#define COMB(a, b) ((a) * (b))
#else
#define COMB(a, b) ((a) + (b))
#endif

#if OP == 5
#define MAP(x) fabs(x)
#elif OP == 6 || OP == 9
#define MAP(x) ((x) * (x))
#elif OP == 8
#define MAP(x) exp((x) - shift)
#else
#define MAP(x) (x)
#endif

#if OP == 1
#define FINAL(a) ((a) / (float)R)
#elif OP == 6
#define FINAL(a) sqrt(a)
#elif OP == 7
#define FINAL(a) log(a)
#elif OP == 8
// The max taken out first keeps exp from overflowing; an infinite max is the answer itself
// (exp(inf - inf) would make it NaN).
#define FINAL(a) (isinf(shift) ? shift : log(a) + shift)
#else
#define FINAL(a) (a)
#endif

// Element offset of linear index idx over a row-major shape of six axes with the given strides.
inline long offset_of(long idx, __global const int* shape, __global const int* strides)
{
    long off = 0;
    for (int d = 5; d >= 0; --d) {
        const long s = shape[d];
        off += (idx % s) * strides[d];
        idx /= s;
    }
    return off;
}

// One work-group per output element: each work-item folds every WG-th element of the reduced
// set, then a tree in local memory combines the WG partial results.
__kernel void reduce_rows(__global const XT* X, __global XT* Y, __global const int* meta,
                          const long nout, const long R, const int contig, const T init)
{
    __local ACC buf[WG];
    const long o = get_group_id(0);
    // A group past the last output (a rounded-up global size) still reaches every barrier (PoCL
    // miscompiles a return before one) but reads and writes nothing.
    const long n = o < nout ? R : 0;
    const int lid = get_local_id(0);
    const long base = (contig || !n) ? o * R : offset_of(o, meta, meta + 6);
    ACC shift = 0;
#if OP == 8
    ACC m = -INFINITY;
    for (long r = lid; r < n; r += WG) m = fmax(m, (ACC)LD(X, base + (contig ? r : offset_of(r, meta + 12, meta + 18))));
    buf[lid] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) buf[lid] = fmax(buf[lid], buf[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    shift = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);  // buf is reused below
#endif
    ACC acc = (ACC)init;
    for (long r = lid; r < n; r += WG) {
        const ACC x = (ACC)LD(X, base + (contig ? r : offset_of(r, meta + 12, meta + 18)));
        acc = COMB(acc, MAP(x));
    }
    buf[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) buf[lid] = COMB(buf[lid], buf[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && o < nout) ST(Y, o, (T)FINAL(buf[0]));
}

// One work-item per output element (the innermost axis is kept: neighbouring work-items read
// neighbouring elements).
__kernel void reduce_items(__global const XT* X, __global XT* Y, __global const int* meta,
                           const long nout, const long R, const T init)
{
    const long o = get_global_id(0);
    if (o >= nout) return;
    const long base = offset_of(o, meta, meta + 6);
    ACC shift = 0;
#if OP == 8
    shift = -INFINITY;
    for (long r = 0; r < R; ++r) shift = fmax(shift, (ACC)LD(X, base + offset_of(r, meta + 12, meta + 18)));
#endif
    ACC acc = (ACC)init;
    for (long r = 0; r < R; ++r) {
        const ACC x = (ACC)LD(X, base + offset_of(r, meta + 12, meta + 18));
        acc = COMB(acc, MAP(x));
    }
    ST(Y, o, (T)FINAL(acc));
}

// ArgMax (is_max = 1) / ArgMin along an axis of extent L, X viewed as outer x L x inner; one
// work-item per (outer, inner). Scanning in order from the first element and replacing only on a
// strict win (or a tie, for select_last) gives onnxruntime's answers, NaN included.
__kernel void arg_reduce(__global const XT* X, __global long* Y, const long outer, const long L,
                         const long inner, const int is_max, const int select_last)
{
    const long gid = get_global_id(0);
    if (gid >= outer * inner) return;
    const long o = gid / inner, i = gid % inner;
    __global const XT* x = X + o * L * inner + i;
    T best = LD(x, 0);
    long at = 0;
    for (long k = 1; k < L; ++k) {
        const T v = LD(x, k * inner);
        const int win = is_max ? (v > best) : (v < best);
        if (win || (select_last && v == best)) {
            best = v;
            at = k;
        }
    }
    Y[gid] = at;
}
