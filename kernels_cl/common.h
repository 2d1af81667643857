// Storage of float32 values, prepended to every kernels_cl source and generated kernel.
// -DOFFLOAD_FP16 (compile spec precision=fp16): float32 values live in device memory as IEEE half
// (stype), read with LOADF and written with STOREF (round to nearest even); kernels still compute
// and accumulate in float. vload_half / vstore_half_rte are core OpenCL 1.2 (no cl_khr_fp16);
// the CUDA prelude provides them. Without it, stype is float and the macros are plain accesses.
#ifndef OFFLOAD_COMMON_H
#define OFFLOAD_COMMON_H
#ifdef OFFLOAD_FP16
typedef half stype;
#define LOADF(p, i) vload_half((size_t)(i), (p))
#define STOREF(p, i, v) vstore_half_rte((float)(v), (size_t)(i), (p))
#else
typedef float stype;
#define LOADF(p, i) ((p)[i])
#define STOREF(p, i, v) ((p)[i] = (v))
#endif

// The geometry arguments of the conv kernels (conv.cl, im2col.cl): input, kernel and output
// extents, strides, begin pads and dilations, each as depth, height, width.
#define CONV_GEOMETRY const int ID, const int IH, const int IW, const int KD, const int KH, const int KW, \
    const int OD, const int OH, const int OW, const int SD, const int SH, const int SW, \
    const int PD, const int PH, const int PW, const int DD, const int DH, const int DW
#endif
