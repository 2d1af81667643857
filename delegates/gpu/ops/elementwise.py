"""Elementwise ops: one generated kernel per fused tree (a single op is a one-node tree).

Each leaf is read through its own stride table (numpy broadcasting, rank ≤ 6); intermediates
live in registers. Values are typed: a leaf or the output is float32, int32, int64 or bool (one
byte, 0 or 1) — integer arithmetic, comparisons and bit ops also take int8, int16 and uint8 …
uint64, computed with C's promotions and cast back, so they wrap as numpy's do — and every node
has a result type (``result_type``: comparisons and logic give
bool, Cast its ``to``, Where its x/y type, the rest their first input's type), so a tree may mix
types (Greater → Where → Mul → Cast is one kernel). The source is generated from the plan step
and the leaf / output dtypes alone, deterministically, so the same step always hits the build
cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from offload.errors import ModelFormatError, UnsupportedOpError
from offload.ir import DataType, attributes_of

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, Ints, broadcast_strides, common, ctype, float_options, pad

F32, I32, I64, BOOL = "float32", "int32", "int64", "bool"
I8, I16, U8, U16, U32, U64 = "int8", "int16", "uint8", "uint16", "uint32", "uint64"
NUM = (F32, I32, I64)
ANY = (*NUM, BOOL)
# The integer types beyond int32 / int64 that arithmetic, comparisons and bit ops take (Cast to
# them only from an integer or from a float clamped to their range: C defines no conversion of a
# float out of it).
SMALL = (I8, I16, U8, U16, U32, U64)
INTS = (I32, I64, *SMALL)
UNSIGNED = (U8, U16, U32, U64)
WIDE = (*NUM, *SMALL)
_DATATYPE = {
    F32: DataType.FLOAT, I32: DataType.INT32, I64: DataType.INT64, BOOL: DataType.BOOL,
    I8: DataType.INT8, I16: DataType.INT16, U8: DataType.UINT8, U16: DataType.UINT16,
    U32: DataType.UINT32, U64: DataType.UINT64,
}  # fmt: skip


@dataclass(frozen=True)
class Signature:
    """What an op's inputs may be: every present input shares one dtype of ``dtypes``; ``arity``
    bounds the input count (absent optional inputs included; None: no upper bound); the result
    is that dtype, or bool."""

    dtypes: tuple[str, ...]
    arity: tuple[int, int | None]
    to_bool: bool = False


_FLOAT_UNARY = (
    "Relu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Gelu", "Erf", "Elu", "Selu", "Celu",
    "Softplus", "Softsign", "Mish", "ThresholdedRelu", "LeakyRelu", "Exp", "Log", "Sqrt",
    "Reciprocal", "Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
    "Cosh", "Asinh", "Acosh", "Atanh",
)  # fmt: skip

SIGNATURES = {
    **{op: Signature((F32,), (1, 1)) for op in _FLOAT_UNARY},
    **{op: Signature(WIDE, (1, 1)) for op in ("Abs", "Sign")},
    "Neg": Signature((*NUM, I8, I16), (1, 1)),  # ONNX's Neg takes no unsigned type
    **{op: Signature(WIDE, (2, 2)) for op in ("Add", "Sub", "Mul", "Div", "Mod")},
    "PRelu": Signature((F32,), (2, 2)),
    "Max": Signature(WIDE, (1, None)),
    "Min": Signature(WIDE, (1, None)),
    "Sum": Signature((F32,), (1, None)),
    "Mean": Signature((F32,), (1, None)),
    "Clip": Signature(WIDE, (1, 3)),
    "Equal": Signature((*WIDE, BOOL), (2, 2), to_bool=True),
    **{
        op: Signature(WIDE, (2, 2), to_bool=True)
        for op in ("Less", "LessOrEqual", "Greater", "GreaterOrEqual")
    },
    **{op: Signature(INTS, (2, 2)) for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")},
    "BitwiseNot": Signature(INTS, (1, 1)),
    "BitShift": Signature(INTS, (2, 2)),
    **{op: Signature((BOOL,), (2, 2)) for op in ("And", "Or", "Xor")},
    "Not": Signature((BOOL,), (1, 1)),
    "IsNaN": Signature((F32,), (1, 1), to_bool=True),
    "IsInf": Signature((F32,), (1, 1), to_bool=True),
}
# Ops whose inputs do not share one dtype: the dtypes each input position takes.
MIXED = {
    "Pow": ((F32,), WIDE),  # a float32 base, an exponent of any (ONNX's T1)
    # x and y share one dtype; not bool, which onnxruntime has no kernel to check against
    "Where": ((BOOL,), WIDE, WIDE),
    # to float32 / int32 / int64 / bool, or to a small integer from an integer or from a float
    # clamped to that integer's range (``check``) (attribute ``to``)
    "Cast": ((*ANY, *SMALL),),
}
_ATTRIBUTES = {
    "Gelu": {"approximate": ("none", "tanh")},
    "Mod": {"fmod": (0, 1)},
    "IsInf": {"detect_positive": (0, 1), "detect_negative": (0, 1)},
    "BitShift": {"direction": ("LEFT", "RIGHT")},
}


def _caps(op: str) -> OpCapability:
    """The capability row of an op: every dtype its inputs or output may have."""
    if op in MIXED:
        dtypes = {*ANY, *SMALL} if op == "Cast" else {t for ts in MIXED[op] for t in ts}
    else:
        dtypes = {*SIGNATURES[op].dtypes, *((BOOL,) if SIGNATURES[op].to_bool else ())}
    dts = frozenset(_DATATYPE[t] for t in dtypes)
    return OpCapability(dts, max_rank=MAX_RANK, attributes=_ATTRIBUTES.get(op, {}))


CAPS = {op: _caps(op) for op in (*SIGNATURES, *MIXED)}
ELEMENTWISE = frozenset(CAPS)


def result_type(op_type: str, attrs: dict, ins: list[str | None]) -> str:
    """The dtype an elementwise op gives for input dtypes ``ins`` (None: an absent optional
    input); UnsupportedOpError when no kernel here takes that combination."""
    while ins and ins[-1] is None:
        ins = ins[:-1]
    present = [t for t in ins if t is not None]
    if op_type in MIXED:
        allowed = MIXED[op_type]
        if len(ins) != len(allowed) or any(t not in a for t, a in zip(ins, allowed)):
            raise UnsupportedOpError(f"{op_type} of {_list(ins)} (takes {_list(allowed)})")
        if op_type == "Where":
            if ins[1] != ins[2]:
                raise UnsupportedOpError(f"Where of {_list(ins)}: x and y differ")
            return ins[1]
        if op_type == "Cast":
            to = next((t for t in (*ANY, *SMALL) if _DATATYPE[t] == attrs.get("to")), None)
            if to is None:
                raise UnsupportedOpError(f"Cast to {attrs.get('to')!r} (takes {', '.join((*ANY, *SMALL))})")
            return to
        return ins[0]
    sig = SIGNATURES.get(op_type)
    if sig is None:
        raise UnsupportedOpError(f"gpu backend: no elementwise kernel for {op_type}")
    lo, hi = sig.arity
    if len(ins) < lo or (hi is not None and len(ins) > hi) or ins[0] is None:
        takes = f"{lo} or more" if hi is None else str(lo) if lo == hi else f"{lo} to {hi}"
        raise UnsupportedOpError(f"{op_type} with {len(ins)} inputs (takes {takes})")
    if op_type != "Clip" and len(present) != len(ins):
        raise UnsupportedOpError(f"{op_type} with an absent input")
    if len(set(present)) != 1 or present[0] not in sig.dtypes:
        raise UnsupportedOpError(f"{op_type} of {_list(ins)} (takes one of {', '.join(sig.dtypes)})")
    if op_type == "Mod" and present[0] == F32 and not attrs.get("fmod"):
        raise UnsupportedOpError("Mod of float32 with fmod=0 (ONNX requires fmod=1)")
    return BOOL if sig.to_bool else present[0]


def _list(ts) -> str:
    return "(" + ", ".join("-" if t is None else t if isinstance(t, str) else "|".join(t) for t in ts) + ")"


def _dtype_name(v) -> str | None:
    return None if v is None else np.dtype(v.type.dtype.numpy).name


def check(op) -> Support | None:
    attrs = attributes_of(op)
    try:
        got = result_type(op.op_type, attrs, [_dtype_name(v) for v in op.inputs])
    except UnsupportedOpError as e:
        return Support(False, str(e))
    want = _dtype_name(op.outputs[0])
    if got != want:
        return Support(False, f"{op.op_type} gives {got}, its output is {want}")
    if op.op_type == "Cast" and got in SMALL and _dtype_name(op.inputs[0]) == F32 and not _clamped(op, got):
        return Support(False, f"Cast of float32 to {got} whose input is not clamped to {got}'s range")
    return None


def _clamped(op, to: str) -> bool:
    """Whether a Cast's float input comes from a Clip with constant bounds inside ``to``'s range
    (C defines the conversion only there)."""
    clip = op.inputs[0].producer
    if clip is None or clip.op_type != "Clip" or clip.domain or len(clip.inputs) < 3:
        return False
    bounds = [v.const_value if v is not None else None for v in clip.inputs[1:3]]
    if any(b is None or b.size != 1 for b in bounds):
        return False
    info = np.iinfo(np.dtype(to))
    return info.min <= float(bounds[0].reshape(-1)[0]) and float(bounds[1].reshape(-1)[0]) <= info.max


CHECKS = dict.fromkeys(CAPS, check)


def _f(x: float) -> str:
    """A float32 literal of OpenCL C."""
    x = float(np.float32(x))
    if not math.isfinite(x):
        return "(INFINITY)" if x > 0 else "(-INFINITY)" if x < 0 else "(NAN)"
    return f"({x!r}f)"


_SOFTPLUS = "(log1p(exp(-fabs(x0))) + fmax(x0, 0.0f))"  # no overflow for large |x|

# Float32 ops without attributes: their expression over x0, x1.
_FLOAT = {
    "Relu": "(x0 < 0.0f ? 0.0f : x0)",
    "Sigmoid": "(x0 >= 0.0f ? 1.0f / (1.0f + exp(-x0)) : exp(x0) / (1.0f + exp(x0)))",
    "HardSwish": "(x0 * fmax(0.0f, fmin(1.0f, x0 * (1.0f / 6.0f) + 0.5f)))",
    "Softplus": _SOFTPLUS,
    "Softsign": "(x0 / (1.0f + fabs(x0)))",
    "Mish": f"(x0 * tanh({_SOFTPLUS}))",
    "Abs": "fabs(x0)",
    "Reciprocal": "(1.0f / x0)",
    # ties to even; x0 - floor(x0) is exact, so the tie test is too (NaN and ±inf fall through
    # to the last branch, which keeps them)
    "Round": "(x0 - floor(x0) < 0.5f ? floor(x0) : x0 - floor(x0) > 0.5f ? floor(x0) + 1.0f"
    " : 2.0f * floor((floor(x0) + 1.0f) * 0.5f))",
    "Sign": "(x0 > 0.0f ? 1.0f : x0 < 0.0f ? -1.0f : x0)",
    "Div": "(x0 / x1)",
    "Mod": "fmod(x0, x1)",
    "Max": "((isnan(x0) || x0 > x1) ? x0 : x1)",  # NaN wins, like numpy
    "Min": "((isnan(x0) || x0 < x1) ? x0 : x1)",
    "PRelu": "(x0 < 0.0f ? x1 * x0 : x0)",
    "Pow": "pow(x0, (float)x1)",
    **{op: f"{op.lower()}(x0)" for op in ("Tanh", "Erf", "Exp", "Log", "Sqrt", "Floor", "Ceil")},
    **{
        op: f"{op.lower()}(x0)"
        for op in ("Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh")
    },
}
# Integer ops (int and long alike). Division by 0 or of the minimum by -1 traps on some CPUs;
# ONNX leaves both undefined, so they give 0 / the wrapped negation instead of a crash.
_INT = {
    "Abs": "(x0 < 0 ? -x0 : x0)",
    "Sign": "((x0 > 0) - (x0 < 0))",
    "Div": "(x1 == 0 ? 0 : x1 == -1 ? -x0 : x0 / x1)",
    "Max": "max(x0, x1)",
    "Min": "min(x0, x1)",
}
# The integer types added after int32 / int64 (their sources stay as they were): comparisons for
# Max / Min, as CUDA has no max() of its own for char or short.
_SMALL = {
    "Max": "(x0 > x1 ? x0 : x1)",
    "Min": "(x0 < x1 ? x0 : x1)",
}
# Unsigned types: there is no -1 to guard against, and x1 == -1 would compare with the maximum.
_UINT = {
    **_SMALL,
    "Abs": "x0",
    "Div": "(x1 == 0 ? 0 : x0 / x1)",
    "Mod": "(x1 == 0 ? 0 : x0 % x1)",
}
# Bit ops of any integer type. A shift by the type's width or more gives 0 (numpy, the ONNX
# reference), where C leaves it undefined; char and short are promoted to int first, and the
# result is cast back to the element type, which drops the bits shifted out.
_BITS = {
    "BitwiseAnd": "(x0 & x1)",
    "BitwiseOr": "(x0 | x1)",
    "BitwiseXor": "(x0 ^ x1)",
    "BitwiseNot": "(~x0)",
}
_WIDTH = {I8: 8, U8: 8, I16: 16, U16: 16, I32: 32, U32: 32, I64: 64, U64: 64}
# Any numeric type.
_NUM = {
    "Neg": "(-x0)",
    "Add": "(x0 + x1)",
    "Sub": "(x0 - x1)",
    "Mul": "(x0 * x1)",
    "Sum": "(x0 + x1)",
    "Equal": "(x0 == x1)",
    "Less": "(x0 < x1)",
    "LessOrEqual": "(x0 <= x1)",
    "Greater": "(x0 > x1)",
    "GreaterOrEqual": "(x0 >= x1)",
    "And": "(x0 && x1)",
    "Or": "(x0 || x1)",
    "Xor": "((x0 != 0) != (x1 != 0))",
    "Not": "(x0 == 0)",
    "Where": "(x0 ? x1 : x2)",
    "IsNaN": "(isnan(x0) != 0)",
}


_VARIADIC = ("Max", "Min", "Sum", "Mean")


def body(op_type: str, attrs: dict, ins: list[str | None], rtype: str) -> str:
    """The statements of a node function over parameters x0, x1, … of dtypes ``ins`` (None: an
    absent input, which has no parameter), returning a value of dtype ``rtype``."""
    if op_type in _VARIADIC:
        # a left fold, one statement per input, so that the source grows linearly with them
        fl = ins[0] == F32
        ints = _SMALL if ins[0] in SMALL else _INT
        pair = _NUM["Add"] if op_type in ("Sum", "Mean") else (_FLOAT if fl else ints)[op_type]
        lines = [f"{ctype(rtype)} r = x0;"]
        lines += [f"r = {pair.replace('x0', 'r').replace('x1', f'x{k}')};" for k in range(1, len(ins))]
        result = f"r / {_f(len(ins))}" if op_type == "Mean" else "r"
        return " ".join([*lines, f"return {result};"])
    return f"return ({ctype(rtype)})({expr(op_type, attrs, ins, rtype)});"


def expr(op_type: str, attrs: dict, ins: list[str | None], rtype: str) -> str:
    """The OpenCL C expression of a (non-variadic) elementwise op over x0, x1, … (see ``body``)."""
    t = ins[0]
    fl = t == F32
    a = {k: _f(v) for k, v in attrs.items() if isinstance(v, float)}
    if op_type == "Clip":
        # an absent bound is the type's lowest / highest value (ONNX): ±FLT_MAX clips ±inf
        lo = "x1" if len(ins) > 1 and ins[1] is not None else "(-3.4028234663852886e38f)" if fl else None
        hi = "x2" if len(ins) > 2 and ins[2] is not None else "(3.4028234663852886e38f)" if fl else None
        if not fl and t in SMALL:
            code = "x0" if lo is None else f"(x0 < {lo} ? {lo} : x0)"
            return code if hi is None else f"(({code}) > {hi} ? {hi} : ({code}))"
        if not fl:
            code = "x0" if lo is None else f"max(x0, {lo})"
            return code if hi is None else f"min({code}, {hi})"
        return f"(isnan(x0) ? x0 : fmin(fmax(x0, {lo}), {hi}))"
    if op_type == "Cast":
        return "(x0 != 0)" if rtype == BOOL else f"(({ctype(rtype)})x0)"
    if op_type == "BitShift":
        w, left = _WIDTH[t], attrs.get("direction") == "LEFT"
        if t in UNSIGNED:
            return f"(x1 < {w} ? x0 {'<<' if left else '>>'} x1 : 0)"
        # Signed (ONNX 26): out of [0, width) a shift gives 0 or, rightwards, the sign (-1 for a
        # negative x); a left shift runs unsigned, where C defines the bits shifted out.
        fits = f"(x1 >= 0 && x1 < {w})"
        if left:
            return f"({fits} ? ({'ulong' if w == 64 else 'uint'})x0 << x1 : 0)"
        return f"({fits} ? x0 >> x1 : x0 < 0 ? -1 : 0)"
    if op_type in _BITS:
        return _BITS[op_type]
    if t in UNSIGNED and op_type in _UINT:
        return _UINT[op_type]
    if op_type == "Mul" and t == U16:  # ushort · ushort promotes to int, which may overflow
        return "((uint)x0 * (uint)x1)"
    if t in SMALL and op_type in _SMALL:
        return _SMALL[op_type]
    if op_type == "Mod" and not fl:
        if attrs.get("fmod"):  # the sign of the dividend, like C
            return "(x1 == 0 || x1 == -1 ? 0 : x0 % x1)"
        # the sign of the divisor, like Python
        return (
            "(x1 == 0 || x1 == -1 ? 0 : (x0 % x1 != 0 && (x0 % x1 < 0) != (x1 < 0)) ? x0 % x1 + x1 : x0 % x1)"
        )
    if op_type == "LeakyRelu":
        return f"(x0 < 0.0f ? {a['alpha']} * x0 : x0)"
    if op_type == "ThresholdedRelu":
        return f"(x0 > {a['alpha']} ? x0 : 0.0f)"
    if op_type == "HardSigmoid":
        v = f"({a['alpha']} * x0 + {a['beta']})"  # compares, not fmin/fmax: NaN stays NaN
        return f"({v} < 0.0f ? 0.0f : {v} > 1.0f ? 1.0f : {v})"
    if op_type == "Elu":
        return f"(x0 < 0.0f ? {a['alpha']} * expm1(x0) : x0)"
    if op_type == "Selu":
        return f"(x0 > 0.0f ? {a['gamma']} * x0 : {a['gamma']} * ({a['alpha']} * expm1(x0)))"
    if op_type == "Celu":
        return f"(isnan(x0) ? x0 : fmax(0.0f, x0) + fmin(0.0f, {a['alpha']} * expm1(x0 / {a['alpha']})))"
    if op_type == "Gelu":
        if attrs.get("approximate") == "tanh":
            # 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)): no cancellation where tanh(u) nears -1
            u2 = "1.5957691216057308f * (x0 + 0.044715f * x0 * x0 * x0)"
            return f"(x0 / (1.0f + exp(-{u2})))"
        return "(0.5f * x0 * (1.0f + erf(x0 * 0.7071067811865476f)))"
    if op_type == "IsInf":
        signs = (("x0 == INFINITY", "detect_positive"), ("x0 == -INFINITY", "detect_negative"))
        tests = [c for c, on in signs if attrs.get(on)]
        return f"({' || '.join(tests)})" if tests else "0"
    for table in (_FLOAT, _NUM) if fl else (_INT, _NUM):
        if op_type in table:
            return table[op_type]
    raise UnsupportedOpError(f"gpu backend: no {t} elementwise kernel for {op_type}")


def _args(node: dict, j: int, leaf_dtypes: list[str], types: list[str]) -> list[tuple[str, str] | None]:
    """A node's arguments as (variable, dtype): a leaf x<i>, an earlier node's t<k>, or None
    (an absent input); absent trailing inputs dropped."""
    args = list(node["args"])
    while args and args[-1] is None:
        args.pop()
    out = []
    for a in args:
        if a is None:
            out.append(None)
        elif isinstance(a, list | tuple) and len(a) == 2 and a[0] == "in" and 0 <= a[1] < len(leaf_dtypes):
            out.append((f"x{a[1]}", leaf_dtypes[a[1]]))
        elif isinstance(a, list | tuple) and len(a) == 2 and a[0] == "node" and 0 <= a[1] < j:
            out.append((f"t{a[1]}", types[a[1]]))
        else:
            raise ModelFormatError(f"gpu backend: fused node {j} has argument {a!r}")
    return out


def fused_source(
    nodes: list[dict],
    leaf_dtypes: list[str],
    out_dtype: str,
    layout: tuple[int, tuple[str, ...]] | None = None,
) -> str:
    """One kernel for a tree of elementwise nodes (plan "Fused" step) over leaves of
    ``leaf_dtypes``: leaves are loaded once, and the intermediates live in registers.

    ``layout`` (``collapse``): the rank of the output once merged, and how each leaf is indexed:
    "flat" (the output's own index), "scalar" (element 0) or "table" (its stride table over that
    many dims). Without one, every leaf reads through its table over all MAX_RANK dims."""
    if not nodes:
        raise ModelFormatError("gpu backend: a fused step without nodes")
    rank, kinds = layout or (MAX_RANK, ("table",) * len(leaf_dtypes))
    funcs, lines, types = [], [], []
    for j, node in enumerate(nodes):
        args = _args(node, j, leaf_dtypes, types)
        ins = [None if a is None else a[1] for a in args]
        try:
            types.append(result_type(node["type"], node["attributes"], ins))
        except UnsupportedOpError as e:
            raise ModelFormatError(f"gpu backend: fused node {j} ({node.get('name')}): {e}") from None
        rt = ctype(types[j])
        params = ", ".join(f"const {ctype(t)} x{k}" for k, t in enumerate(ins) if t is not None)
        code = body(node["type"], node["attributes"], ins, types[j])
        funcs.append(f"// {node['type']}\ninline {rt} f{j}({params}) {{ {code} }}")
        lines.append(f"const {rt} t{j} = f{j}({', '.join(a[0] for a in args if a is not None)});")
    if types[-1] != out_dtype:
        raise ModelFormatError(f"gpu backend: fused tree gives {types[-1]}, its output is {out_dtype}")
    n = len(leaf_dtypes)
    params = "".join(f", __global const {_buffer(t)}* a{i}" for i, t in enumerate(leaf_dtypes))
    table = [i for i in range(n) if kinds[i] == "table"]
    index = {i: "gid" if kinds[i] == "flat" else "0" if kinds[i] == "scalar" else f"o{i}" for i in range(n)}
    loads = " ".join(
        f"const {ctype(t)} x{i} = {_load(t, f'a{i}', index[i])};" for i, t in enumerate(leaf_dtypes)
    )
    store = f"STOREF(out, gid, t{len(nodes) - 1});" if out_dtype == F32 else f"out[gid] = t{len(nodes) - 1};"
    nl = "\n    "
    walk = ""
    if table:
        offs = " ".join(f"int o{i} = 0;" for i in table)
        steps = " ".join(f"o{i} += j * meta[{MAX_RANK * (i + 1)} + d];" for i in table)
        walk = f"""
    int rem = gid; {offs}
    for (int d = {MAX_RANK - 1}; d >= {MAX_RANK - rank}; --d) {{
        const int s = meta[d]; const int j = rem % s; rem /= s; {steps}
    }}"""
    return f"""{common()}// generated: fused {"+".join(nd["type"] for nd in nodes)}
{chr(10).join(funcs)}
__kernel void ew(__global {_buffer(out_dtype)}* out{params}, __global const int* meta, const int n) {{
    const int gid = get_global_id(0);
    if (gid >= n) return;{walk}
    {loads}
    {nl.join(lines)}
    {store}
}}
"""


def collapse(shape: tuple, strides: list[list[int]]) -> tuple[list[int], list[list[int]], tuple[str, ...]]:
    """The output ``shape`` and each leaf's element ``strides`` over it with size-1 dims dropped
    and neighbouring dims merged where every leaf steps through them as one (a leaf's stride of
    the outer dim is its inner stride times the inner size), and how each leaf is then indexed
    ("flat": as the output, "scalar": one element, "table": through its strides). A Relu, or an
    Add of two same-shape tensors, is then one flat index per work-item instead of six divisions
    and remainders (DenseNet-121's 121 Relu launches: 387 ms on PoCL, 2 cores)."""
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    merged: list[int] = []
    groups: list[list[int]] = []
    for d in dims:
        if groups and all(s[groups[-1][-1]] == s[d] * shape[d] for s in strides):
            merged[-1] *= shape[d]
            groups[-1].append(d)
        else:
            merged.append(shape[d])
            groups.append([d])
    leaf = [[s[g[-1]] for g in groups] for s in strides]
    flat = broadcast_strides(merged, merged)
    kinds = tuple("flat" if s == flat else "scalar" if not any(s) else "table" for s in leaf)
    return merged, leaf, kinds


def _buffer(dtype: str) -> str:
    """The element type of a buffer of ``dtype``: float32 values are stored as stype (common.h)."""
    return "stype" if dtype == F32 else ctype(dtype)


def _load(dtype: str, buf: str, index: str) -> str:
    return f"LOADF({buf}, {index})" if dtype == F32 else f"{buf}[{index}]"


def as_tree(step: dict) -> dict:
    """A single elementwise op as a one-node "Fused" step (absent trailing inputs dropped)."""
    ins = list(step["inputs"])
    while ins and ins[-1] is None:
        ins.pop()
    leaves = [i for i in ins if i is not None]
    args, k = [], 0
    for i in ins:
        if i is None:
            args.append(None)
        else:
            args.append(["in", k])
            k += 1
    node = {"type": step["type"], "name": step.get("name"), "attributes": step["attributes"], "args": args}
    return {**step, "type": "Fused", "inputs": leaves, "nodes": [node]}


def launch_fused(b: Builder, step: dict) -> None:
    ins, (out,) = step["inputs"], step["outputs"]
    out_shape = b.shape(out)
    n = math.prod(out_shape)
    shape, strides, kinds = collapse(out_shape, [broadcast_strides(b.shape(i), out_shape) for i in ins])
    meta = pad(shape, 1)
    for s in strides:
        meta += pad(s, 0)
    layout = (len(shape), kinds)
    source = fused_source(step["nodes"], [b.dtype(i).name for i in ins], b.dtype(out).name, layout)
    program = b.program(source, float_options(b))
    b.launch(program, "ew", (n,), None, [Buf(out), *(Buf(i) for i in ins), Ints(tuple(meta)), np.int32(n)])


def launch(b: Builder, step: dict) -> None:
    launch_fused(b, as_tree(step))


LAUNCH = {**dict.fromkeys(CAPS, launch), "Fused": launch_fused}
