// QuantizeLinear and DequantizeLinear (ONNX), per tensor or per axis. -DQ= the quantized element
// type (char, uchar; int for a dequantized int32 bias), -DLO= / -DHI= its range (quantize),
// -DHAS_ZP=1 when a zero point is given (an absent one is 0). Element g of a tensor of n elements
// takes entry (g / inner) % C of the scale and the zero point: C = 1 per tensor, C = the axis's
// size and inner = the element count after the axis per axis.
//
// Numerics are the ONNX reference's, in float32: quantize divides x by the scale (one IEEE
// division), rounds half to even (rint), adds the zero point and saturates to [LO, HI] before the
// conversion (C defines none out of range; NaN saturates to LO, as fmax drops it); dequantize
// subtracts the zero point exactly in long, converts to float (nearest) and multiplies once.
#ifndef Q
#define Q char
#endif
#ifndef LO
#define LO (-128)
#endif
#ifndef HI
#define HI 127
#endif
#ifndef HAS_ZP
#define HAS_ZP 0
#endif

#if HAS_ZP
#define ZP_ARG , __global const Q* zp
#define ZP(c) ((long)zp[c])
#else
#define ZP_ARG
#define ZP(c) 0L
#endif

__kernel void quantize(__global const stype* x, __global const stype* scale ZP_ARG, __global Q* y,
                       const long inner, const long C, const long n) {
    const long g = get_global_id(0);
    if (g >= n) return;
    const long c = (g / inner) % C;
    const float v = rint(LOADF(x, g) / LOADF(scale, c)) + (float)ZP(c);
    y[g] = (Q)fmin(fmax(v, (float)LO), (float)HI);
}

__kernel void dequantize(__global const Q* x, __global const stype* scale ZP_ARG, __global stype* y,
                         const long inner, const long C, const long n) {
    const long g = get_global_id(0);
    if (g >= n) return;
    const long c = (g / inner) % C;
    STOREF(y, g, (float)((long)x[g] - ZP(c)) * LOADF(scale, c));
}
