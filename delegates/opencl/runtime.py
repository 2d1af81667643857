"""The runtime half of the `opencl` backend: compiler → program → allocator → device, then the plan.

It imports nothing from ``compiler.py``. Elementwise kernels are generated here, one per op
(type, arity, attribute values), broadcasting numpy-style through per-step shape/stride tables;
MatMul and Gemm run ``kernels_cl/matmul.cl``. Intermediates stay on the device during execute.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from offload.errors import KernelError, ModelFormatError, OffloadError, UnsupportedOpError

from ..backend import Availability, BackendRuntime, CompileSpec
from .plan import FORMAT, FORMATS

try:
    import pyopencl as cl
except Exception as e:  # ImportError, or a broken ICD loader
    cl = None
    _IMPORT_ERROR = f"pyopencl is not importable: {type(e).__name__}: {e}"

MAX_RANK = 6
TILE = 16


class OpenCLBuildError(KernelError):
    """An OpenCL C source that failed to build; the message carries the build log."""


# ---- compiler: source → cl.Program, cached in-process --------------------------------------------

_PROGRAMS: dict[str, object] = {}


def build(device: Device, source: str, options: str = "") -> cl.Program:
    """Build ``source`` for ``device``; cached by source + options + device name + driver version."""
    d = device.device
    key = hashlib.sha256(
        "\0".join([source, options, d.name, d.driver_version, str(id(device.context))]).encode()
    ).hexdigest()
    program = _PROGRAMS.get(key)
    if program is None:
        try:
            program = cl.Program(device.context, source).build(options=options, devices=[d])
        except cl.Error as e:
            raise OpenCLBuildError(f"opencl backend: kernel build failed on {d.name}:\n{e}") from None
        _PROGRAMS[key] = program
    return program


# ---- program: one kernel + its launch shape and arguments -------------------------------------


@dataclass
class Launch:
    kernel: object
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    args: list = field(default_factory=list)  # value ids (int) resolved at execute, or fixed args

    def __call__(self, queue, buffers: dict[int, object]) -> None:
        args = [buffers[a.id] if isinstance(a, _Ref) else a for a in self.args]
        self.kernel(queue, self.global_size, self.local_size, *args)


@dataclass(frozen=True)
class _Ref:
    id: int


# ---- allocator: device buffers, copy in / out -----------------------------------------------


class Allocator:
    def __init__(self, context, queue):
        self.context, self.queue = context, queue

    def alloc(self, nbytes: int):
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(int(nbytes), 4))

    def copyin(self, buffer, array: np.ndarray) -> None:
        if array.size:
            cl.enqueue_copy(self.queue, buffer, np.ascontiguousarray(array, np.float32), is_blocking=True)

    def copyout(self, buffer, shape) -> np.ndarray:
        out = np.empty(shape, np.float32)
        if out.size:
            cl.enqueue_copy(self.queue, out, buffer, is_blocking=True)
        return out


# ---- device: context + queue, chosen by the `device` spec -------------------------------------


def _all_devices() -> list[tuple[int, int, object]]:
    found = []
    for p, platform in enumerate(cl.get_platforms()):
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        found.extend((p, d, dev) for d, dev in enumerate(devices))
    return found


def _select(spec: str | None):
    devices = _all_devices()
    if not devices:
        raise OffloadError("opencl backend: no OpenCL platform with a device")
    if spec is None or spec == "":
        return devices[0][2]
    if ":" in spec and all(s.strip().isdigit() for s in spec.split(":", 1)):
        p, d = (int(s) for s in spec.split(":", 1))
        match = [dev for pi, di, dev in devices if (pi, di) == (p, d)]
    elif spec.strip().isdigit():
        match = [devices[int(spec)][2]] if int(spec) < len(devices) else []
    else:
        match = [dev for _, _, dev in devices if spec.lower() in dev.name.lower()]
    if not match:
        names = ", ".join(f"{p}:{d} {dev.name}" for p, d, dev in devices)
        raise OffloadError(f"opencl backend: no device matches '{spec}' (devices: {names})")
    return match[0]


class Device:
    def __init__(self, device):
        self.device = device
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context, device)
        self.allocator = Allocator(self.context, self.queue)


_DEVICES: dict[str, Device] = {}


def device_for(spec: str | None) -> Device:
    dev = _select(spec)
    key = f"{dev.platform.name}/{dev.name}/{dev.int_ptr}"
    if key not in _DEVICES:
        _DEVICES[key] = Device(dev)
    return _DEVICES[key]


# ---- elementwise kernels, generated ---------------------------------------------------------


def _f(x: float) -> str:
    """A float32 literal of OpenCL C."""
    x = float(np.float32(x))
    if not math.isfinite(x):
        return "(INFINITY)" if x > 0 else "(-INFINITY)" if x < 0 else "(NAN)"
    return f"({x!r}f)"


def _expr(op_type: str, attrs: dict, arity: int) -> str:
    """The OpenCL C expression of an elementwise op over x0, x1, …"""
    simple = {
        "Relu": "(x0 < 0.0f ? 0.0f : x0)",
        "Sigmoid": "(x0 >= 0.0f ? 1.0f / (1.0f + exp(-x0)) : exp(x0) / (1.0f + exp(x0)))",
        "Tanh": "tanh(x0)",
        "Exp": "exp(x0)",
        "Log": "log(x0)",
        "Sqrt": "sqrt(x0)",
        "Neg": "(-x0)",
        "Abs": "fabs(x0)",
        "Add": "(x0 + x1)",
        "Sub": "(x0 - x1)",
        "Mul": "(x0 * x1)",
        "Div": "(x0 / x1)",
        "Max": "((isnan(x0) || x0 > x1) ? x0 : x1)",
        "Min": "((isnan(x0) || x0 < x1) ? x0 : x1)",
    }
    if op_type in simple:
        return simple[op_type]
    if op_type == "LeakyRelu":
        return f"(x0 < 0.0f ? {_f(attrs.get('alpha', 0.01))} * x0 : x0)"
    if op_type == "Clip":
        lo = "x1" if arity > 1 else "(-INFINITY)"
        hi = "x2" if arity > 2 else "(INFINITY)"
        return f"(isnan(x0) ? x0 : fmin(fmax(x0, {lo}), {hi}))"
    raise UnsupportedOpError(f"opencl backend: no kernel for {op_type}")


def elementwise_source(op_type: str, attrs: dict, arity: int) -> str:
    """One op's kernel: the fused kernel of a one-node tree whose inputs are all leaves."""
    node = {"type": op_type, "attributes": attrs, "args": [["in", k] for k in range(arity)]}
    return fused_source([node], arity)


def fused_source(nodes: list[dict], n_leaves: int) -> str:
    """One kernel for a tree of elementwise nodes (plan "Fused" step): leaves are loaded once,
    each through its own stride table, and the intermediates live in registers."""
    funcs, body = [], []
    for j, node in enumerate(nodes):
        args = list(node["args"])
        while args and args[-1] is None:
            args.pop()
        arity = len(args)
        params = ", ".join(f"const float x{k}" for k in range(arity))
        funcs.append(
            f"// {node['type']}\ninline float f{j}({params}) {{ return {_expr(node['type'], node['attributes'], arity)}; }}"
        )
        vals = []
        for k, a in enumerate(args):
            if a is None:  # an absent Clip bound
                vals.append("(-INFINITY)" if k == 1 else "(INFINITY)")
            elif a[0] == "in":
                if not 0 <= int(a[1]) < n_leaves:
                    raise ModelFormatError(f"opencl backend: fused node {j} reads leaf {a[1]}")
                vals.append(f"x{int(a[1])}")
            elif a[0] == "node" and 0 <= int(a[1]) < j:
                vals.append(f"t{int(a[1])}")
            else:
                raise ModelFormatError(f"opencl backend: fused node {j} has argument {a!r}")
        body.append(f"const float t{j} = f{j}({', '.join(vals)});")
    params = "".join(f", __global const float* a{i}" for i in range(n_leaves))
    offs = " ".join(f"int o{i} = 0;" for i in range(n_leaves))
    steps = " ".join(f"o{i} += j * meta[{MAX_RANK * (i + 1)} + d];" for i in range(n_leaves))
    loads = " ".join(f"const float x{i} = a{i}[o{i}];" for i in range(n_leaves))
    nl = "\n    "
    return f"""// generated: fused {"+".join(n["type"] for n in nodes)}
{chr(10).join(funcs)}
__kernel void ew(__global float* out{params}, __global const int* meta, const int n) {{
    const int gid = get_global_id(0);
    if (gid >= n) return;
    int rem = gid; {offs}
    for (int d = {MAX_RANK - 1}; d >= 0; --d) {{
        const int s = meta[d]; const int j = rem % s; rem /= s; {steps}
    }}
    {loads}
    {nl.join(body)}
    out[gid] = t{len(nodes) - 1};
}}
"""


def _broadcast_strides(shape, out_shape) -> list[int]:
    """Element strides of a row-major ``shape`` read as ``out_shape`` (0 along broadcast axes)."""
    shape = [1] * (len(out_shape) - len(shape)) + list(shape)
    strides, acc = [0] * len(shape), 1
    for d in reversed(range(len(shape))):
        strides[d] = acc if shape[d] != 1 else 0
        acc *= shape[d]
    return strides


def _pad(xs, fill) -> list[int]:
    return [fill] * (MAX_RANK - len(xs)) + list(xs)


_ALIASES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")


def _source(file: str) -> str:
    return resources.files("offload.kernels_cl").joinpath(file).read_text()


# ---- the handle and the runtime -------------------------------------------------------------


@dataclass
class Handle:
    device: Device
    inputs: list[int]
    outputs: list[int]
    shapes: dict[int, tuple[int, ...]]
    buffers: dict[int, object]
    launches: list[Launch]
    keep: list = field(default_factory=list)  # meta buffers referenced by launches


def _spec(specs: list[CompileSpec], key: str) -> CompileSpec | None:
    return next((s for s in specs if s.key == key), None)


class OpenCLRuntime(BackendRuntime):
    name = "opencl"

    def is_available(self) -> Availability:
        if cl is None:
            return Availability(False, _IMPORT_ERROR)
        try:
            devices = _all_devices()
        except cl.Error as e:
            return Availability(False, f"no OpenCL platform: {e}")
        if not devices:
            return Availability(False, "no OpenCL platform with a device")
        return Availability(True)

    def devices(self) -> list[str]:
        if cl is None:
            return []
        try:
            return [f"{p}:{d} {dev.name} ({dev.platform.name})" for p, d, dev in _all_devices()]
        except cl.Error:
            return []

    def init(self, processed: bytes, compile_specs: list[CompileSpec], weights: Mapping[str, np.ndarray]):
        if cl is None:
            raise OffloadError(f"opencl backend: {_IMPORT_ERROR}")
        try:
            plan = json.loads(processed)
        except ValueError as e:
            raise ModelFormatError(f"opencl backend: the delegate blob is not a JSON plan: {e}") from None
        if plan.get("format") not in FORMATS:
            raise ModelFormatError(f"opencl backend: plan format {plan.get('format')!r}, expected {FORMAT!r}")
        missing = sorted(set(plan["weights"].values()) - set(weights))
        if missing:
            raise ModelFormatError(f"opencl backend: weights not given: {', '.join(missing)}")
        spec = _spec(compile_specs, "device")
        device = device_for(spec.text() if spec is not None else None)
        shapes = {int(i): tuple(s) for i, s in plan["shapes"].items()}
        alloc = device.allocator
        buffers = {i: alloc.alloc(4 * math.prod(s)) for i, s in shapes.items()}
        for i, name in plan["weights"].items():
            w = np.asarray(weights[name])
            if w.shape != shapes[int(i)]:
                raise ModelFormatError(
                    f"opencl backend: weight '{name}' has shape {w.shape}, expected {shapes[int(i)]}"
                )
            alloc.copyin(buffers[int(i)], w)
        handle = Handle(device, plan["inputs"], plan["outputs"], shapes, buffers, [])
        for op in plan["ops"]:
            kind = op["type"]
            if kind in ("MatMul", "Gemm"):
                self._matmul(handle, op)
            elif kind in _ALIASES:
                self._alias(handle, op)
            elif kind == "Conv":
                self._conv(handle, op)
            elif kind in ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"):
                self._pool(handle, op)
            elif kind == "BatchNormalization":
                self._batchnorm(handle, op)
            elif kind == "Softmax":
                self._softmax(handle, op)
            elif kind == "Transpose":
                self._transpose(handle, op)
            elif kind == "Concat":
                self._concat(handle, op)
            elif kind == "Fused":
                self._fused(handle, op)
            else:
                self._elementwise(handle, op)
        device.queue.finish()
        return handle

    def _alias(self, h: Handle, op: dict) -> None:
        """Reshape / Flatten / Squeeze / Unsqueeze / Identity: the output shares the input's buffer."""
        (src,), (out,) = op["inputs"], op["outputs"]
        if math.prod(h.shapes[src]) != math.prod(h.shapes[out]):
            raise ModelFormatError(f"opencl backend: {op['type']} from {h.shapes[src]} to {h.shapes[out]}")
        if out in h.inputs:  # never rebind a buffer the caller fills; copy instead
            raise ModelFormatError(f"opencl backend: {op['type']} writes a partition input")
        h.buffers[out].release()
        h.buffers[out] = h.buffers[src]

    def _launch1d(self, h: Handle, file: str, name: str, n: int, args: list, options: str = "") -> None:
        if n == 0:
            return
        program = build(h.device, _source(file), options)
        h.launches.append(Launch(cl.Kernel(program, name), (n,), None, args))

    def _conv(self, h: Handle, op: dict) -> None:
        a = op["attributes"]
        x, w, *rest = op["inputs"]
        b = rest[0] if rest else None
        (out,) = op["outputs"]
        N, C, H, W = h.shapes[x]
        M, _, KH, KW = h.shapes[w]
        _, _, OH, OW = h.shapes[out]
        SH, SW = a.get("strides") or (1, 1)
        DH, DW = a.get("dilations") or (1, 1)
        PT, PL, _, _ = a.get("pads") or (0, 0, 0, 0)
        G = int(a.get("group", 1))
        i32 = np.int32
        args = [_Ref(x), _Ref(w), _Ref(b) if b is not None else _Ref(out), _Ref(out), i32(b is not None)]
        args += [i32(v) for v in (N, C, H, W, M, G, KH, KW, OH, OW, SH, SW, PT, PL, DH, DW)]
        self._launch1d(h, "conv.cl", "conv2d", N * M * OH * OW, args)

    def _pool(self, h: Handle, op: dict) -> None:
        a, kind = op["attributes"], op["type"]
        (x,), (out,) = op["inputs"], op["outputs"]
        N, C, H, W = h.shapes[x]
        _, _, OH, OW = h.shapes[out]
        if kind.startswith("Global"):
            (KH, KW), (SH, SW), pads, cip = (H, W), (1, 1), (0, 0, 0, 0), 0
        else:
            KH, KW = a["kernel_shape"]
            SH, SW = a.get("strides") or (1, 1)
            pads = a.get("pads") or (0, 0, 0, 0)
            cip = int(a.get("count_include_pad", 0))
        is_max = int(kind in ("MaxPool", "GlobalMaxPool"))
        PT, PL, PB, PR = pads
        args = [_Ref(x), _Ref(out)] + [
            np.int32(v) for v in (is_max, N * C, H, W, OH, OW, KH, KW, SH, SW, PT, PL, PB, PR, cip)
        ]
        self._launch1d(h, "pool.cl", "pool2d", N * C * OH * OW, args)

    def _batchnorm(self, h: Handle, op: dict) -> None:
        x, scale, bias, mean, var = op["inputs"]
        (out,) = op["outputs"]
        shape = h.shapes[x]
        C = shape[1] if len(shape) > 1 else 1
        inner = math.prod(shape[2:])
        n = math.prod(shape)
        eps = np.float32(op["attributes"].get("epsilon", 1e-5))
        args = [_Ref(x), _Ref(scale), _Ref(bias), _Ref(mean), _Ref(var), _Ref(out)]
        args += [np.int32(n), np.int32(C), np.int32(inner), eps]
        self._launch1d(h, "norm.cl", "batchnorm", n, args)

    def _softmax(self, h: Handle, op: dict) -> None:
        (x,), (out,) = op["inputs"], op["outputs"]
        shape = h.shapes[x]
        if not shape:  # a scalar: softmax of one element
            shape = (1,)
        axis = int(op["attributes"].get("axis", -1)) % len(shape)
        outer, L, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
        args = [_Ref(x), _Ref(out), np.int32(outer), np.int32(L), np.int32(inner)]
        self._launch1d(h, "norm.cl", "softmax", outer * inner, args)

    def _elementwise(self, h: Handle, op: dict) -> None:
        ins = op["inputs"]
        while ins and ins[-1] is None:
            ins = ins[:-1]
        (out,) = op["outputs"]
        out_shape = h.shapes[out]
        arity = len(ins)
        meta = _pad(out_shape, 1)
        args: list = [_Ref(out)]
        for k, i in enumerate(ins):
            if i is None:  # an absent Clip bound: a one-element buffer holding ∓inf
                fill = np.array([-np.inf if k == 1 else np.inf], np.float32)
                buf = h.device.allocator.alloc(4)
                h.device.allocator.copyin(buf, fill)
                h.keep.append(buf)
                args.append(buf)
                meta += [0] * MAX_RANK
            else:
                args.append(_Ref(i))
                meta += _pad(_broadcast_strides(h.shapes[i], out_shape), 0)
        meta_buf = h.device.allocator.alloc(4 * len(meta))
        cl.enqueue_copy(h.device.queue, meta_buf, np.asarray(meta, np.int32))
        h.keep.append(meta_buf)
        n = math.prod(out_shape)
        if n == 0:
            return
        program = build(h.device, elementwise_source(op["type"], op["attributes"], arity))
        kernel = cl.Kernel(program, "ew")
        args += [meta_buf, np.int32(n)]
        h.launches.append(Launch(kernel, (n,), None, args))

    def _transpose(self, h: Handle, op: dict) -> None:
        (x,), (out,) = op["inputs"], op["outputs"]
        shape = h.shapes[x]
        rank = len(shape)
        perm = op["attributes"].get("perm") or list(reversed(range(rank)))
        perm = [int(p) % rank for p in perm] if rank else []
        if sorted(perm) != list(range(rank)) or rank > MAX_RANK:
            raise ModelFormatError(f"opencl backend: Transpose perm {perm} of a rank-{rank} tensor")
        in_strides = [math.prod(shape[d + 1 :]) for d in range(rank)]
        meta = _pad([shape[p] for p in perm], 1) + _pad([in_strides[p] for p in perm], 0)
        meta_buf = h.device.allocator.alloc(4 * len(meta))
        cl.enqueue_copy(h.device.queue, meta_buf, np.asarray(meta, np.int32))
        h.keep.append(meta_buf)
        n = math.prod(shape)
        self._launch1d(h, "layout.cl", "transpose", n, [_Ref(x), _Ref(out), meta_buf, np.int32(n)])

    def _concat(self, h: Handle, op: dict) -> None:
        (out,) = op["outputs"]
        oshape = h.shapes[out]
        axis = int(op["attributes"].get("axis", 0)) % len(oshape)
        inner = math.prod(oshape[axis + 1 :])
        offset = 0
        for x in op["inputs"]:
            xs = h.shapes[x]
            chunk = xs[axis] * inner
            n = math.prod(xs)
            args = [_Ref(x), _Ref(out), np.int32(chunk), np.int32(oshape[axis] * inner), np.int32(offset)]
            self._launch1d(h, "layout.cl", "concat_copy", n, args + [np.int32(n)])
            offset += chunk
        if offset != oshape[axis] * inner:
            raise ModelFormatError(f"opencl backend: Concat inputs do not add up to {oshape}")

    def _fused(self, h: Handle, op: dict) -> None:
        ins, (out,) = op["inputs"], op["outputs"]
        out_shape = h.shapes[out]
        meta = _pad(out_shape, 1)
        for i in ins:
            meta += _pad(_broadcast_strides(h.shapes[i], out_shape), 0)
        meta_buf = h.device.allocator.alloc(4 * len(meta))
        cl.enqueue_copy(h.device.queue, meta_buf, np.asarray(meta, np.int32))
        h.keep.append(meta_buf)
        n = math.prod(out_shape)
        if n == 0:
            return
        program = build(h.device, fused_source(op["nodes"], len(ins)))
        args = [_Ref(out), *(_Ref(i) for i in ins), meta_buf, np.int32(n)]
        h.launches.append(Launch(cl.Kernel(program, "ew"), (n,), None, args))

    def _matmul(self, h: Handle, op: dict) -> None:
        attrs = op["attributes"]
        a, b, *rest = op["inputs"]
        c = rest[0] if rest else None
        (out,) = op["outputs"]
        sa, sb, so = h.shapes[a], h.shapes[b], h.shapes[out]
        program = build(
            h.device, resources.files("offload.kernels_cl").joinpath("matmul.cl").read_text(), f"-DTS={TILE}"
        )
        alpha, beta = np.float32(1.0), np.float32(0.0)
        bias, has_bias, scm, scn = _Ref(out), 0, 0, 0
        if op["type"] == "Gemm":
            ta, tb = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
            M, K = (sa[1], sa[0]) if ta else sa
            N = sb[0] if tb else sb[1]
            sam, sak = (1, sa[1]) if ta else (sa[1], 1)
            sbk, sbn = (1, sb[1]) if tb else (sb[1], 1)
            alpha, beta = np.float32(attrs.get("alpha", 1.0)), np.float32(attrs.get("beta", 1.0))
            if c is not None:
                bias, has_bias = _Ref(c), 1
                scm, scn = _pad(_broadcast_strides(h.shapes[c], (M, N)), 0)[-2:]
            batches = [(0, 0, 0)]
        else:
            M, K, N = sa[-2], sa[-1], sb[-1]
            sam, sak, sbk, sbn = K, 1, N, 1
            batch = so[:-2]
            a_str = _broadcast_strides(sa[:-2], batch)
            b_str = _broadcast_strides(sb[:-2], batch)
            batches = []
            for k, idx in enumerate(itertools.product(*(range(d) for d in batch))):
                a_off = M * K * sum(i * s for i, s in zip(idx, a_str))
                b_off = K * N * sum(i * s for i, s in zip(idx, b_str))
                batches.append((a_off, b_off, k * M * N))
        if M * N == 0:
            return
        gs = (-(-N // TILE) * TILE, -(-M // TILE) * TILE)
        for a_off, b_off, c_off in batches:
            kernel = cl.Kernel(program, "gemm")
            args = [
                np.int32(M),
                np.int32(N),
                np.int32(K),
                _Ref(a),
                np.int32(a_off),
                np.int32(sam),
                np.int32(sak),
                _Ref(b),
                np.int32(b_off),
                np.int32(sbk),
                np.int32(sbn),
                _Ref(out),
                np.int32(c_off),
                bias,
                np.int32(has_bias),
                np.int32(scm),
                np.int32(scn),
                alpha,
                beta,
            ]
            h.launches.append(Launch(kernel, gs, (TILE, TILE), args))

    def execute(self, handle: Handle, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(handle.inputs):
            raise OffloadError(f"opencl backend: expected {len(handle.inputs)} inputs, got {len(inputs)}")
        alloc = handle.device.allocator
        for i, x in zip(handle.inputs, inputs):
            x = np.asarray(x)
            if x.dtype != np.float32 or x.shape != handle.shapes[i]:
                raise OffloadError(
                    f"opencl backend: input {i} is {x.dtype}{list(x.shape)}, "
                    f"expected float32{list(handle.shapes[i])}"
                )
            alloc.copyin(handle.buffers[i], x)
        queue = handle.device.queue
        try:
            for launch in handle.launches:
                launch(queue, handle.buffers)
            return [alloc.copyout(handle.buffers[i], handle.shapes[i]) for i in handle.outputs]
        except cl.Error as e:
            raise KernelError(f"opencl backend: {type(e).__name__}: {e}") from e

    def destroy(self, handle: Handle) -> None:
        for buf in {id(b): b for b in handle.buffers.values()}.values():  # aliases share buffers
            buf.release()
        handle.buffers.clear()
        handle.launches.clear()
        handle.keep.clear()
