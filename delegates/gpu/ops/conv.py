"""Conv and ConvTranspose, NCHW with 1 to 3 spatial dims, float32: ``conv.cl`` and ``im2col.cl``.

Every conv runs as a 3-D one (missing leading spatial dims have size 1, kernel 1, stride 1, pad
0). Which way a Conv runs (``_strategy``, in this order):

- ``direct`` (``conv_direct``, one work-item per output) for depthwise convs (one input channel
  per group): a GEMM per channel would have one row.
- ``gemm`` when the kernel is all ones with stride 1 and no padding: one image of one group is
  already the GEMM's [C/G, spatial] operand, so the conv is one GEMM per image, its groups a
  batch of GEMMs in one launch (``GemmCall.batch``) with the bias and a fused Relu in it.
- ``direct`` when each output sums fewer than ``DIRECT_MAX_K[kind]`` = C/G * prod(kernel)
  products, by the device's kind: on a GPU the GEMM's K loop is then one to three tiles, and
  im2col's extra pass over memory dominates. On a CPU device never (see below).
- ``implicit`` otherwise on a GPU device, for a step of plan format 8 on (key ``"columns":
  "implicit"``): one ``conv_gemm`` launch (matmul.cl) for every image and group, the blocked GEMM
  whose B tiles gather im2col's columns straight from X, with the bias, residual and Relu at its
  store. Its sums are those of im2col then ``gemm_blocked``, bit for bit, without writing and
  reading back the [C/G * prod(kernel), prod(output spatial)] columns, and without the per-group
  ``add_bias`` launch. (A device whose work-groups hold fewer than 256 work-items, and plans of
  older formats, run ``im2col``.)
- ``im2col`` otherwise: per (image, group) ``im2col.cl`` writes the column matrix into a step
  scratch buffer, then one GEMM. On a CPU device ``im2col_packed`` writes it straight in the
  packed GEMM's panel layout (one pass): PoCL runs the packed GEMM about 8x faster than the GPU
  tiling that ``conv_gemm`` shares with ``gemm_blocked`` (``linalg``'s docstring).

On PoCL (2 CPU cores, median of 5 runs): 3x3 64→64 on 56x56 direct 325 ms, im2col+GEMM 331 ms;
1x1 256→64 on 56x56 direct 688 ms, GEMM 105 ms; depthwise 3x3 on 32x112x112 direct 28 ms,
im2col+GEMM 313 ms; 3x3 8→16 on 32x32 (K=72) direct 3.0 ms, im2col+GEMM 4.0 ms. On a GPU the
GEMM side (cuBLAS) only gains, hence the low threshold.

The GEMMs are ``linalg.GemmCall``s run by the builder's ``gemm`` when it has one (cuBLAS on CUDA),
else by the matmul.cl kernel ``linalg.variant_for`` picks for the device's kind; the bias rides on the GEMM (strides scm=1, scn=0) when the conv
has one group, and is added by ``add_bias`` otherwise (a GemmCall's bias has no offset; ``conv_gemm``
adds each group's own).
A depthwise Conv step with key ``shuffle`` (S, ``gpu/shuffle.py``) reads its input's channels
shuffled in S groups, through its kernel's indexing (the channel shuffle before it costs no copy).
What the plan fused into the Conv (step key ``epilogue``, ``gpu/epilogue.py``) is applied where
the result is stored, by conv_direct or the GEMM after the bias: a residual Add (step key
``residual``) by writing into the residual's buffer and adding what it holds, then a Relu. Where
the residual's buffer cannot be written (``_writable_in_place``), or a grouped conv runs as
per-group GEMMs (its bias comes after them, from ``add_bias``), one ``add_residual`` launch adds it.
ConvTranspose is a gather kernel: each output element sums the inputs that scatter onto it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType

from ...backend import OpCapability, Support
from .. import slices
from ..api import Buf, Builder, Scratch, float_options, fp16, options, source
from . import linalg

_F32 = frozenset({DataType.FLOAT})
_AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
# Below this many products per output (C/G * prod(kernel)) a conv runs direct, by device kind
# (module docstring).
DIRECT_MAX_K = {"gpu": 64, "cpu": 0}

CAPS = {
    "Conv": OpCapability(_F32, max_rank=5, attributes={"auto_pad": _AUTO_PAD}),
    "ConvTranspose": OpCapability(_F32, max_rank=5, attributes={"auto_pad": _AUTO_PAD}),
}


def _check(op) -> Support | None:
    x, w = op.inputs[0], op.inputs[1] if len(op.inputs) > 1 else None
    # X of unknown rank has W's (ONNX requires it); X's channels, where they are not known yet,
    # are checked against W by the launcher on the shapes it is given.
    rank = x.type.rank if x.type.rank is not None or w is None else w.type.rank
    if rank is None or not 3 <= rank <= 5:
        return Support(False, f"{op.op_type} of rank {rank} (takes 1 to 3 spatial dims)")
    if w is None or w.type.rank != rank:
        return Support(False, f"{op.op_type} whose weight rank differs from its input's")
    C, (W0, W1) = (x.type.shape[1] if x.type.shape is not None else None), w.type.shape[:2]
    G = int(op.attributes.get("group", 1))
    # Conv: W is [M, C/G, k...]; ConvTranspose: W is [C, M/G, k...].
    fits = G >= 1 and (W0 % G == 0 and W1 * G == C if op.op_type == "Conv" else W0 == C and C % G == 0)
    if G < 1 or (isinstance(C, int) and not fits):
        return Support(False, f"{op.op_type} with group={G} does not fit X {x.type.shape}, W {w.type.shape}")
    ks = op.attributes.get("kernel_shape")
    if ks is not None and [int(k) for k in ks] != list(w.type.shape[2:]):
        return Support(False, f"{op.op_type} kernel_shape {list(ks)} differs from the weight's")
    return None


CHECKS = dict.fromkeys(CAPS, _check)


def _ints(a: dict, name: str, n: int, fill: int) -> list[int]:
    v = a.get(name)
    return [int(x) for x in v] if v is not None else [fill] * n


def geometry(a: dict, ins, ks, outs) -> tuple[list[int], list[int], list[int], list[int]]:
    """(strides, dilations, begin pads, end pads) of a Conv or pooling step over spatial dims
    ``ins`` with kernel ``ks`` giving ``outs``; auto_pad pads follow from the static shapes."""
    r = len(ins)
    strides, dils = _ints(a, "strides", r, 1), _ints(a, "dilations", r, 1)
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [
            max(0, (o - 1) * s + (k - 1) * d + 1 - i) for i, k, o, s, d in zip(ins, ks, outs, strides, dils)
        ]
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        return strides, dils, begin, [t - b for t, b in zip(total, begin)]
    if auto == "VALID":
        return strides, dils, [0] * r, [0] * r
    pads = _ints(a, "pads", 2 * r, 0)
    return strides, dils, pads[:r], pads[r:]


def _as3(xs: list[int], fill: int) -> list[int]:
    return [fill] * (3 - len(xs)) + list(xs)


def _strategy(cg: int, ks, strides, begin, end, kind: str = "gpu", implicit: bool = False) -> str:
    """How a Conv runs, "direct", "gemm", "implicit" or "im2col", by the rule of the module
    docstring; ``implicit``: the step's plan asks for implicit columns and the device can run them."""
    if cg == 1:
        return "direct"
    if all(k == 1 for k in ks) and all(s == 1 for s in strides) and not any(begin) and not any(end):
        return "gemm"
    if cg * math.prod(ks) < DIRECT_MAX_K[kind]:
        return "direct"
    return "implicit" if implicit and kind == "gpu" else "im2col"


def _conv(b: Builder, step: dict) -> None:
    a = step["attributes"]
    x, w, *rest = step["inputs"]
    bias = rest[0] if rest else None
    (out,) = step["outputs"]
    (N, C, *ins), (M, cg, *ks), (_, _, *outs) = b.shape(x), b.shape(w), b.shape(out)
    G = int(a.get("group", 1))
    if cg * G != C or M % G:
        raise ModelFormatError(
            f"gpu backend: Conv '{step.get('name')}': group={G}, X {b.shape(x)}, W {b.shape(w)}"
        )
    strides, dils, begin, end = geometry(a, ins, ks, outs)
    i32 = np.int32
    geo = [i32(v) for v in (*_as3(ins, 1), *_as3(ks, 1), *_as3(outs, 1))]
    geo += [i32(v) for v in (*_as3(strides, 1), *_as3(begin, 0), *_as3(dils, 1))]
    blas = getattr(b, "gemm", None)
    kind = "cpu" if blas is None and getattr(b, "device_kind", "gpu") == "cpu" else "gpu"
    implicit = step.get("columns") == "implicit" and getattr(b, "max_local_size", 256) >= 256
    how = _strategy(cg, ks, strides, begin, end, kind, implicit)
    epilogue = step.get("epilogue") or []
    residual = step.get("residual") if "Add" in epilogue else None
    # the kernels that write every output once, after its bias, can add the residual there; a
    # grouped conv run as per-group GEMMs adds its bias afterwards (add_bias), so it cannot
    epilogue_in_kernel = G == 1 or how in ("direct", "gemm", "implicit")
    in_place = (
        residual is not None and epilogue_in_kernel and _writable_in_place(b, residual, out, (x, w, bias))
    )
    if in_place:
        b.alias(out, residual)  # the conv adds its result to the residual, in its buffer
        b.written_in_place.add(out)
    # Relu in the conv's kernels unless a residual is added after them
    relu = "Relu" in epilogue and (residual is None or in_place)
    # image n of the output starts at base + n * image in its buffer: its own, or its slice of the
    # Concat that reads it (``gpu/slices.py``), where only GEMMs store it (add_bias and conv_direct
    # index a whole tensor)
    base, image = 0, M * math.prod(outs)
    found = slices.slot(b, out) if residual is None and how != "direct" else None
    if found is not None and not (how == "im2col" and G > 1 and bias is not None):
        concat, base, image = found
        b.alias(out, concat)
        b.sliced.add(out)
    shuffle = int(step.get("shuffle", 1))  # X's channels read shuffled (``gpu/shuffle.py``)
    if shuffle != 1 and (how != "direct" or shuffle < 1 or C % shuffle):
        raise ModelFormatError(
            f"gpu backend: Conv '{step.get('name')}' reads X {b.shape(x)} shuffled in {shuffle} groups "
            "(only a depthwise Conv, over channels the groups divide)"
        )
    if how == "direct":
        flags = int(bias is not None) | int(relu) << 1 | int(in_place) << 2
        args = [Buf(x), Buf(w), Buf(bias if bias is not None else out), Buf(out), i32(flags)]
        args += [i32(N), i32(C), i32(M), i32(G), i32(shuffle), *geo]
        program = b.program(source("conv.cl"), float_options(b))
        if kind == "cpu":  # depthwise, the only direct conv on a CPU device
            b.launch(program, "conv_depthwise_rows", (N * M * math.prod(outs[:-1]),), None, args)
        else:
            b.launch(program, "conv_direct", (N * M * math.prod(outs),), None, args)
        _add_residual(b, step, out, residual, in_place, "Relu" in epilogue)
        return
    mg, K, P, IP = M // G, cg * math.prod(ks), math.prod(outs), math.prod(ins)
    if how == "implicit":
        flags = int(bias is not None) | int(relu) << 1 | int(in_place) << 2
        args = [Buf(x), Buf(w), Buf(bias if bias is not None else out), Buf(out), i32(flags)]
        _conv_gemm(b, args + [i32(base), i32(image), i32(C), i32(G), i32(mg), *geo], N * G, mg, P)
        _add_residual(b, step, out, residual, in_place, "Relu" in epilogue)
        return
    run = blas or (lambda g: linalg.gemm_kernel(b, g))
    if how == "gemm" and G > 1:  # the groups as one batch of GEMMs, the bias and Relu in it
        for n in range(N):
            batch = dict(batch=G, sab=mg * K, sbb=cg * IP, scb=mg * P, sbias=mg if bias is not None else 0)
            call = linalg.GemmCall(
                mg, P, K, w, 0, K, 1, x, n * C * IP, P, 1, out, base + n * image, bias, 1, 0, 1.0, 1.0
            )
            run(replace(call, relu=relu, accumulate=in_place, **batch))
        _add_residual(b, step, out, residual, in_place, "Relu" in epilogue)
        return
    gemm_bias = bias if G == 1 else None
    # on a CPU device the columns go straight into the packed GEMM's B panels (one pass)
    packed = how == "im2col" and kind == "cpu"
    if packed:
        cols = Scratch(4 * -(-P // 16) * 16 * K, "im2col")
    else:
        cols = Scratch((2 if fp16(b) else 4) * K * P, "im2col")  # float32 columns, stored as stype
    for n in range(N):
        for g in range(G):
            x_off = (n * C + g * cg) * IP
            if how == "gemm":
                operand, b_off = x, x_off
            elif packed:
                col_args = [Buf(x), np.int64(x_off), cols, i32(cg), *geo]
                program = b.program(source("im2col.cl"), float_options(b))
                b.launch(program, "im2col_packed", (K, math.prod(outs[:-1])), None, col_args)
                operand, b_off = cols, 0
            else:
                col_args = [Buf(x), np.int64(x_off), cols, i32(cg), *geo]
                b.launch(b.program(source("im2col.cl"), float_options(b)), "im2col", (K * P,), None, col_args)
                operand, b_off = cols, 0
            c_off = base + n * image + g * mg * P
            run(
                linalg.GemmCall(
                    mg,
                    P,
                    K,
                    w,
                    g * mg * K,
                    K,
                    1,
                    operand,
                    b_off,
                    P,
                    1,
                    out,
                    c_off,
                    gemm_bias,
                    1,
                    0,
                    1.0,
                    1.0,
                    b_packed=packed,
                    relu=relu and (G == 1 or bias is None),
                    accumulate=in_place,
                )
            )
    if bias is not None and G > 1:
        args = [Buf(out), Buf(bias), i32(N * M), i32(M), i32(P), i32(int(relu) << 1)]
        b.launch(b.program(source("conv.cl"), float_options(b)), "add_bias", (P, N * M), None, args)
    _add_residual(b, step, out, residual, in_place, "Relu" in epilogue)


def _conv_gemm(b: Builder, args: list, images: int, m: int, p: int) -> None:
    """One ``conv_gemm`` launch over ``images`` (image, group) pairs of an m x p output each, with
    the blocking ``linalg.blocked_variant`` gives a GEMM of that output, else 16 x 16 tiles."""
    variant = linalg.blocked_variant(m, p, ("blocked8", "blocked"))
    wpt = linalg.VARIANTS[variant][1] // 16 if variant else 1
    block = 16 * wpt
    program = b.program(source("matmul.cl"), options(b, f"-DWPT={wpt}"))
    grid = (-(-p // block) * 16, -(-m // block) * 16, images)
    b.launch(program, "conv_gemm", grid, (16, 16, 1), args)


def _writable_in_place(b: Builder, residual: int, out: int, reads) -> bool:
    """Whether a Conv may add its result into ``residual``'s buffer: of its output's shape, not a
    constant or a value a control step keeps, not read by the Conv itself, and no view shares the
    buffer but the outputs of Convs that wrote into it in place before (ResNet's chained blocks)
    or into their slice of the Concat that made it (``gpu/slices.py``: read by that Concat only):
    the plan ensures that no step after the Add reads the residual, and so none reads those."""
    if b.shape(residual) != b.shape(out):
        raise ModelFormatError(
            f"gpu backend: a Conv's residual of shape {list(b.shape(residual))} for its output "
            f"{list(b.shape(out))} (the plan fuses only an Add of equal shapes)"
        )
    root = b.root(residual)
    views = [v for v, r in b.alias_of.items() if r == root]
    own = root not in b.host and root not in b.pinned and root not in b.alias_of
    return (
        own
        and all(v in b.written_in_place or v in b.sliced for v in views)
        and all(v is None or b.root(v) != root for v in reads)
    )


def _add_residual(b: Builder, step: dict, out: int, residual: int | None, in_place: bool, relu: bool) -> None:
    """The residual Add (and Relu) of a Conv that could not add it in place: one elementwise launch."""
    if residual is None or in_place:
        return
    n = math.prod(b.shape(out))
    args = [Buf(out), Buf(residual), np.int64(n), np.int32(int(relu) << 1)]
    b.launch(b.program(source("conv.cl"), float_options(b)), "add_residual", (n,), None, args)


def transpose_begin_pads(a: dict, ins, ks, outs) -> list[int]:
    """The begin pads of a ConvTranspose: given, or split from the total padding that the static
    output shape implies (output_shape / auto_pad), as the ONNX spec words it."""
    r = len(ins)
    auto = a.get("auto_pad", "NOTSET")
    if auto == "VALID":
        return [0] * r
    if auto == "NOTSET" and a.get("output_shape") is None:
        return _ints(a, "pads", 2 * r, 0)[:r]
    strides, dils, opad = (
        _ints(a, "strides", r, 1),
        _ints(a, "dilations", r, 1),
        _ints(a, "output_padding", r, 0),
    )
    total = [
        s * (i - 1) + p + (k - 1) * d + 1 - o for i, k, o, s, d, p in zip(ins, ks, outs, strides, dils, opad)
    ]
    return [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]


def _conv_transpose(b: Builder, step: dict) -> None:
    a = step["attributes"]
    x, w, *rest = step["inputs"]
    bias = rest[0] if rest else None
    (out,) = step["outputs"]
    (N, C, *ins), (_, mg, *ks), (_, M, *outs) = b.shape(x), b.shape(w), b.shape(out)
    G = int(a.get("group", 1))
    if C % G or mg * G != M:
        raise ModelFormatError(
            f"gpu backend: ConvTranspose '{step.get('name')}': group={G}, X {b.shape(x)}, W {b.shape(w)}"
        )
    strides, dils = _ints(a, "strides", len(ins), 1), _ints(a, "dilations", len(ins), 1)
    begin = transpose_begin_pads(a, ins, ks, outs)
    i32 = np.int32
    args = [Buf(x), Buf(w), Buf(bias if bias is not None else out), Buf(out), i32(bias is not None)]
    args += [i32(v) for v in (N, C, M, G, *_as3(ins, 1), *_as3(ks, 1), *_as3(outs, 1))]
    args += [i32(v) for v in (*_as3(strides, 1), *_as3(begin, 0), *_as3(dils, 1))]
    b.launch(
        b.program(source("conv.cl"), float_options(b)),
        "conv_transpose",
        (N * M * math.prod(outs),),
        None,
        args,
    )


LAUNCH = {"Conv": _conv, "ConvTranspose": _conv_transpose}
