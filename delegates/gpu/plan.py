"""The plan format shared by the compile and runtime halves of the GPU backends (JSON, no kernel sources).

{"format": FORMAT,
 "inputs": [value id, ...],                  # the partition's non-constant inputs, in order
 "weights": {"value id": "tensor name"},     # constants, given by name to init
 "shapes": {"value id": [dim, ...]},         # every value's shape; a dim is a size, a symbol's
                                             # name or null (unknown): known when specialized
 "dtypes": {"value id": "float32" | ...},    # every value's numpy dtype name (format 3)
 "ops": [{"type", "name", "attributes", "inputs": [id | null], "outputs": [id | null]}],
 "outputs": [value id, ...],
 "host_inputs": [value id, ...],             # inputs read on the host: shape-deciding values
 "constants": {"value id": tensor},          # small constants of branches and bodies (format 5)
 "precision": "fp16",                        # optional (absent: fp32): float32 values stored as half
 "fp32": {"value id": "why"}}                # under fp16: the float32 values stored as float32
                                             # (mixed precision, ``precision.py``); a step with
                                             # "fp32": 1 runs its kernels on float32 storage

A plan whose shapes are all sizes is specialized once, at init. Otherwise the runtime specializes
it for each input signature (the inputs' shapes, the host inputs' values) it meets: it infers every
value's shape from the inputs' (``step_shapes``), folds shape arithmetic on the host, then records
launches as for a static plan (``specialize.py``).

The step type "Fused" is a tree of elementwise ops run as one generated kernel, its
intermediates never stored. Its "inputs" are the tree's leaf values (each broadcast to the output
shape through its own stride table), "outputs" the root's value, and
 "nodes": [{"type", "name", "attributes", "args": [["in", leaf index] | ["node", j] | null]}]
in evaluation order, the root last. The runtime generates the kernel source from the plan at init,
deterministically (the same plan gives the same source, so the build cache hits).

A "Conv" step may carry what the plan fused into it (``epilogue.py``, format 6): "epilogue":
["Relu"] | ["Add"] | ["Add", "Relu"], in order after the bias, and for "Add" "residual": the value
id added (the step's output is then the Add's or the Relu's value). A depthwise "Conv" step may
carry "shuffle": S (format 7, ``shuffle.py``): it reads its input's channels shuffled in S groups,
as the Reshape-Transpose-Reshape it replaces would have copied them. A "Conv" step whose weight
has more than one input channel per group carries "columns": "implicit" (format 8): where it runs
as a GEMM over its im2col columns on a GPU device, that GEMM gathers them from X as it loads its
tiles (one launch, ``ops/conv.py``); a step without it (formats up to 7) writes the columns to
a buffer first.

Control steps (``control.py``) hold sub-plans {"inputs": [id], "ops": [step], "outputs": [id]}
over the same value ids: "If" has "branches": [then, else], "Loop" has "body". A tensor (an
attribute or a constant) is {"array": [...], "dtype", "shape"}.
Formats 1 and 2 (float32 only, no "dtypes"), 3 (static shapes, no "host_inputs"), 4 (no
control steps), 5 (no epilogues), 6 (no shuffles) and 7 (no implicit columns) still load.
"""

import json

import numpy as np

from offload.errors import ModelFormatError

FORMAT = "offload-gpu-plan/8"
PRECISIONS = ("fp32", "fp16")  # how float32 values are stored on the device
FORMATS = (
    "offload-opencl-plan/1",
    "offload-opencl-plan/2",
    "offload-gpu-plan/3",
    "offload-gpu-plan/4",
    "offload-gpu-plan/5",
    "offload-gpu-plan/6",
    "offload-gpu-plan/7",
    FORMAT,
)
MAX_NESTING = 16  # control steps inside control steps
EPILOGUES = (["Relu"], ["Add"], ["Add", "Relu"])  # what a Conv step may run after its bias (format 6)
COLUMNS = ("implicit",)  # how a Conv step's GEMM gets its im2col columns (format 8)
MAX_SYMBOL = 128  # characters of a symbolic dim's name


# Kernels index elements with 32-bit ints: a tensor must stay below this many elements.
MAX_ELEMENTS = 2**31 - 1
DTYPES = (
    "float32",
    "float64",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "bool",
)


def parse(processed: bytes | dict, backend: str) -> dict:
    """The plan in a delegate blob (its JSON bytes, or the JSON already read), checked for shape
    before a launcher reads it.

    Every value id a step names has a shape and a dtype, shapes are non-negative and bounded,
    and ids are ints: a damaged or hostile blob gives a ModelFormatError, never a crash.
    """

    def bad(what: str):
        return ModelFormatError(f"{backend} backend: malformed plan: {what}")

    try:
        raw = isinstance(processed, bytes | bytearray | memoryview | str)
        plan = (
            json.loads(bytes(processed) if isinstance(processed, memoryview) else processed)
            if raw
            else processed
        )
    except (ValueError, RecursionError) as e:
        raise ModelFormatError(f"{backend} backend: the delegate blob is not a JSON plan: {e}") from None
    if not isinstance(plan, dict) or plan.get("format") not in FORMATS:
        got = plan.get("format") if isinstance(plan, dict) else type(plan).__name__
        raise ModelFormatError(f"{backend} backend: plan format {got!r}, expected {FORMAT!r}")
    shapes, dtypes = plan.get("shapes"), plan.get("dtypes", {})
    if not isinstance(shapes, dict) or not isinstance(dtypes, dict):
        raise bad("'shapes' / 'dtypes' are not tables")
    for i, s in shapes.items():
        if not str(i).isdigit() or not (s is None or (isinstance(s, list) and all(_dim(d) for d in s))):
            raise bad(f"value {i!r} has shape {s!r}")
        if s is None:  # rank unknown until the plan specializes
            continue
        n = 1
        for d in s:
            n *= d if type(d) is int else 1
        if len(s) > 16 or n > MAX_ELEMENTS:
            raise bad(f"value {i} of shape {s} is too large (at most {MAX_ELEMENTS} elements, rank 16)")
    for i, t in dtypes.items():
        if i not in shapes or t not in DTYPES:
            raise bad(f"value {i!r} has dtype {t!r}")
    if plan.get("precision", "fp32") not in PRECISIONS:
        raise bad(f"precision {plan.get('precision')!r} (takes {', '.join(PRECISIONS)})")
    kept = plan.setdefault("fp32", {})
    if not isinstance(kept, dict) or not all(
        dtypes.get(i, "float32") == "float32" and i in shapes and isinstance(why, str)
        for i, why in kept.items()
    ):
        raise bad("'fp32' is not a table of known float32 values to reasons")

    def known(v, optional=False) -> bool:
        return (optional and v is None) or (type(v) is int and str(v) in shapes)

    for key in ("inputs", "outputs"):
        if not isinstance(plan.get(key), list) or not all(known(v) for v in plan[key]):
            raise bad(f"'{key}' names unknown values")
    host = plan.setdefault("host_inputs", [])
    if not isinstance(host, list) or not all(known(v) and v in plan["inputs"] for v in host):
        raise bad("'host_inputs' names values that are not inputs")
    weights = plan.get("weights")
    if not isinstance(weights, dict) or not all(
        i in shapes and isinstance(n, str) for i, n in weights.items()
    ):
        raise bad("'weights' is not a table of known values to tensor names")
    constants = plan.setdefault("constants", {})
    if not isinstance(constants, dict) or not all(
        i in shapes
        and isinstance(t, dict)
        and t.get("dtype") == dtypes.get(i)
        and t.get("shape") == shapes[i]
        for i, t in constants.items()
    ):
        raise bad("'constants' is not a table of known values to tensors of their dtype and shape")

    def check_steps(ops, depth: int, where: str) -> None:
        if not isinstance(ops, list):
            raise bad(f"{where}'ops' is not a list")
        if depth > MAX_NESTING:
            raise bad(f"control steps nest deeper than {MAX_NESTING}")
        for k, step in enumerate(ops):
            if not (
                isinstance(step, dict)
                and isinstance(step.get("type"), str)
                and isinstance(step.get("attributes", {}), dict)
                and isinstance(step.get("inputs"), list)
                and isinstance(step.get("outputs"), list)
                and all(known(v, optional=True) for v in step["inputs"] + step["outputs"])
                and known(step.get("residual"), optional=True)
            ):
                raise bad(f"{where}step {k} is not a step of known values")
            if step["type"] == "Fused" and not isinstance(step.get("nodes"), list):
                raise bad(f"{where}fused step {k} has no nodes")
            epilogue = step.get("epilogue")
            if epilogue is not None and (
                step["type"] != "Conv"
                or epilogue not in EPILOGUES
                or ("Add" in epilogue) != (step.get("residual") is not None)
            ):
                raise bad(f"{where}step {k} has an epilogue {epilogue!r} (a Conv's: one of {EPILOGUES})")
            shuffle = step.get("shuffle")
            if shuffle is not None and (step["type"] != "Conv" or type(shuffle) is not int or shuffle < 1):
                raise bad(f"{where}step {k} has a shuffle {shuffle!r} (a Conv's: a number of groups)")
            columns = step.get("columns")
            if columns is not None and (step["type"] != "Conv" or columns not in COLUMNS):
                raise bad(f"{where}step {k} has columns {columns!r} (a Conv's: one of {COLUMNS})")
            subs = {"If": step.get("branches"), "Loop": [step.get("body")]}.get(step["type"])
            if subs is None:
                continue
            arity = {"If": (2, 1, 0), "Loop": (1, 2, 1)}[step["type"]]  # sub-plans, inputs, outputs
            if not isinstance(subs, list) or len(subs) != arity[0]:
                raise bad(f"{where}{step['type']} step {k} has no sub-plans")
            for sub in subs:
                if not (
                    isinstance(sub, dict)
                    and all(isinstance(sub.get(key), list) for key in ("inputs", "outputs"))
                    and all(known(v) for v in sub["inputs"] + sub["outputs"])
                ):
                    raise bad(f"{where}{step['type']} step {k} has a malformed sub-plan")
                n_in, n_out = len(step["inputs"]), len(step["outputs"])
                if step["type"] == "If" and (len(sub["inputs"]) != 0 or len(sub["outputs"]) != n_out):
                    raise bad(f"{where}If step {k}: a branch does not give one result per output")
                if step["type"] == "Loop" and (
                    len(sub["inputs"]) != n_in or len(sub["outputs"]) != 1 + n_out or n_in < 2
                ):
                    raise bad(f"{where}Loop step {k}: its body does not match its inputs and outputs")
                check_steps(sub.get("ops"), depth + 1, f"{where}{step['type']} step {k}: ")

    check_steps(plan.get("ops"), 0, "")
    return plan


def _dim(d) -> bool:
    """Whether ``d`` is a dim a plan may hold: a size, a symbol's name, or None (unknown)."""
    return (type(d) is int and d >= 0) or d is None or (isinstance(d, str) and 0 < len(d) <= MAX_SYMBOL)


def is_static(plan: dict) -> bool:
    """Whether every value's shape in ``plan`` is known: then one specialization serves every run."""
    return all(s is not None and all(type(d) is int for d in s) for s in plan["shapes"].values())


def attribute(value):
    """A plan attribute as a launcher or shape inference wants it: tensor attributes (stored as
    {"array", "dtype", "shape"}) become numpy arrays; numbers, text and lists stay as they are."""
    if isinstance(value, dict) and "array" in value:
        try:
            return np.asarray(value["array"], np.dtype(value["dtype"])).reshape(value["shape"])
        except (TypeError, ValueError) as e:
            raise ModelFormatError(f"malformed tensor attribute in a GPU plan: {e}") from None
    return value


def step_shapes(step: dict, shapes: dict, dtypes: dict, host: dict, backend: str) -> list:
    """The shape of each of ``step``'s outputs (None for an absent one) that its op makes of its
    input shapes (``shapes``, all known) and host values; a ModelFormatError when they disagree
    with the shapes the plan states.

    Launchers size their index ranges from these shapes: a blob whose shapes disagree with each
    other would make a kernel read or write out of bounds, and a symbolic plan learns its shapes
    here. Ops are inferred with offload's own shape inference (host values given as constants); a
    fused tree's output is its leaves broadcast.
    """
    from offload.ir import DataType, Operation, TensorType, Value
    from offload.ir.inference import infer_op

    def bad(what: str):
        return ModelFormatError(f"{backend} backend: plan step {step.get('name') or step['type']}: {what}")

    outs = step["outputs"]
    if step["type"] == "Fused":
        if len([v for v in outs if v is not None]) != 1 or outs[0] is None:
            raise bad(f"a fused step has {len(outs)} outputs")
        try:
            inferred = [tuple(np.broadcast_shapes(*(shapes[i] for i in step["inputs"])))]
        except ValueError:
            raise bad(f"leaves of shapes {[shapes[i] for i in step['inputs']]} do not broadcast") from None
    else:
        values = []
        for i in step["inputs"]:
            if i is None:
                values.append(None)
                continue
            t = TensorType(DataType.from_numpy(dtypes[i]), tuple(shapes[i]))
            values.append(Value(f"v{i}", t, host.get(i)))
        attrs = {k: attribute(a) for k, a in step.get("attributes", {}).items()}
        op = Operation(step["type"], values, attrs, num_outputs=len(outs))
        inferred = []
        for got, want in zip(infer_op(op), outs):
            if want is not None and isinstance(got, TensorType) and np.dtype(got.dtype.numpy) != dtypes[want]:
                raise bad(f"output {want} is {dtypes[want]}, the op makes {got}")
            known = isinstance(got, TensorType) and got.shape is not None
            inferred.append(tuple(got.shape) if known and all(type(d) is int for d in got.shape) else None)
    result = []
    for got, want in zip(inferred, outs):
        if want is None:
            result.append(None)
            continue
        if shapes[want] is None:  # rank unknown in the plan: the op's inferred shape stands
            if got is None:
                raise bad(f"the shape of output {want} is not known from its inputs")
            result.append(got)
            continue
        stated = tuple(shapes[want])
        if got is None:  # inference cannot say: the plan's shape stands when it is known
            if not all(type(d) is int for d in stated):
                raise bad(f"the shape of output {want} {list(stated)} is not known from its inputs")
            got = stated
        if len(got) != len(stated) or any(type(d) is int and d != g for d, g in zip(stated, got)):
            raise bad(f"output {want} is {dtypes[want]}{list(stated)}, the op makes {list(got)}")
        result.append(got)
    return result
