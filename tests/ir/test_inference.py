"""Type and shape inference, checked against onnx.shape_inference on ONNX's backend node models."""

from __future__ import annotations

import glob
import os
import pathlib
import warnings
from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import shape_inference

import offload
from offload.ir import Block, DataType, Function, Operation, Program, TensorType, Value, inference
from offload.ir.infer_dims import broadcast_shapes
from offload.ir.inference import FAMILIES, infer_types

# Measured 0.823 (1297/1576): most of the rest need values fed at run time (a Reshape's shape,
# TopK's k, Resize's scales as graph inputs) or are data dependent (NonZero, Unique...).
MIN_STATIC_OUTPUT_COVERAGE = 0.80
# Measured 0.993 (4243/4274) on the on-disk model cases; the rest are sequences and strings.
MIN_STATIC_VALUE_COVERAGE = 0.97
DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


# ---- the reference comparison -------------------------------------------------------------


def _tensor_facts(tp: onnx.TypeProto):
    """(element type, dims or None) of a tensor TypeProto; dims are int or None (unknown)."""
    if tp.WhichOneof("value") != "tensor_type":
        return None
    tt = tp.tensor_type
    if not tt.elem_type:
        return None
    if not tt.HasField("shape"):
        return tt.elem_type, None
    return tt.elem_type, tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)


def _graphs(g: onnx.GraphProto):
    yield g
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g)
            for sub in a.graphs:
                yield from _graphs(sub)


def _strip(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every intermediate type and the main graph's output types removed."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for g in _graphs(m.graph):
        del g.value_info[:]
    for out in m.graph.output:
        out.ClearField("type")
    return m


def _reference(model: onnx.ModelProto) -> dict:
    """name → (elem type, dims) that onnx infers; the declared graph outputs are ground truth."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for g in _graphs(m.graph):
        del g.value_info[:]
    try:
        inferred = shape_inference.infer_shapes(m)
    except Exception:
        inferred = m
    facts = {}
    for g in _graphs(inferred.graph):
        for vi in list(g.value_info) + list(g.output):
            f = _tensor_facts(vi.type)
            if f is not None:
                facts[vi.name] = f
    return facts


def _produced(block: Block):
    for op in block.operations:
        yield from op.outputs
        for b in op.blocks:
            yield from _produced(b)


@dataclass
class Tally:
    compared: int = 0
    disagreements: list = field(default_factory=list)
    outputs: int = 0
    static_outputs: int = 0
    failures: list = field(default_factory=list)


def _compare(ours: TensorType, ref) -> str | None:
    """Why ``ours`` contradicts the reference (elem type, dims), or None when it does not."""
    elem, dims = ref
    if int(ours.dtype) != elem:
        return f"dtype {ours.dtype.name} vs {DataType(elem).name}"
    if ours.shape is None or dims is None:
        return None
    if len(ours.shape) != len(dims):
        return f"shape {ours.shape} vs {dims}"
    for a, b in zip(ours.shape, dims):
        if isinstance(a, int) and b is not None and a != b:
            return f"shape {ours.shape} vs {dims}"
    return None


def _check_case(case, tally: Tally) -> None:
    ref = _reference(case.model)
    try:
        program = offload.load(_strip(case.model).SerializeToString())
    except Exception as e:  # import problems belong to the importer's tests
        tally.failures.append(f"{case.name}: import: {e}")
        return
    infer_types(program)
    for v in _produced(program.main.body):
        if isinstance(v.type, TensorType) and v.name in ref:
            tally.compared += 1
            problem = _compare(v.type, ref[v.name])
            if problem:
                tally.disagreements.append(f"{case.name}: {v.name}: {problem}")
    if "expanded" in case.name:
        return
    for out, declared in zip(program.main.outputs, case.model.graph.output):
        facts = _tensor_facts(declared.type)
        if facts is None or facts[1] is None or None in facts[1]:
            continue
        tally.outputs += 1
        t = out.type
        if isinstance(t, TensorType) and t.is_static and (int(t.dtype), tuple(t.shape)) == facts:
            tally.static_outputs += 1


@pytest.fixture(scope="module")
def tally() -> Tally:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    t = Tally()
    for case in cases:
        _check_case(case, t)
    return t


def test_agrees_with_onnx_shape_inference(tally):
    print(
        f"\ncompared {tally.compared} values, {len(tally.disagreements)} disagreements "
        f"({len(tally.failures)} models the importer refused)"
    )
    assert tally.compared > 1000
    assert not tally.disagreements, "\n".join(tally.disagreements[:40])


def test_infers_static_output_shapes(tally):
    coverage = tally.static_outputs / tally.outputs
    print(f"\nstatic graph outputs inferred: {tally.static_outputs}/{tally.outputs} = {coverage:.3f}")
    assert coverage >= MIN_STATIC_OUTPUT_COVERAGE


def test_on_disk_models_agree_and_are_static():
    """The simple, pytorch-converted, pytorch-operator and light (real network) model cases."""
    paths = glob.glob(os.path.join(DATA, "light", "*.onnx"))
    paths += glob.glob(os.path.join(DATA, "*", "*", "model.onnx"))
    values = static = 0
    problems = []
    for path in sorted(paths):
        model = onnx.load(path)
        ref = _reference(model)
        try:
            program = offload.load(_strip(model).SerializeToString())
        except Exception:
            continue
        infer_types(program)
        for v in _produced(program.main.body):
            values += 1
            static += isinstance(v.type, TensorType) and v.type.is_static
            if isinstance(v.type, TensorType) and v.name in ref:
                problem = _compare(v.type, ref[v.name])
                if problem:
                    problems.append(f"{os.path.relpath(path, DATA)}: {v.name}: {problem}")
    print(f"\n{len(paths)} models: {static}/{values} values fully static")
    assert values > 1000
    assert not problems, "\n".join(problems[:40])
    assert static / values >= MIN_STATIC_VALUE_COVERAGE


def test_compare_catches_contradictions():
    assert _compare(TensorType(DataType.FLOAT, (2, 3)), (1, (2, None))) is None
    assert _compare(TensorType(DataType.FLOAT, (2, "N")), (1, (2, 5))) is None
    assert _compare(TensorType(DataType.FLOAT, (2, 3)), (1, (2, 4)))
    assert _compare(TensorType(DataType.FLOAT, (2, 3)), (1, (2, 3, 1)))
    assert _compare(TensorType(DataType.INT64, (2, 3)), (1, (2, 3)))


# ---- hand-written cases -------------------------------------------------------------------

F32 = DataType.FLOAT


def _program(op: Operation, *inputs: Value) -> Program:
    block = Block("main", inputs=list(inputs))
    for v in op.inputs:
        if v is not None and v.const_value is not None:
            block.constants[v.name] = v
    block.append(op)
    block.outputs = list(op.outputs)
    return Program({"main": Function("main", block)})


def _infer(op_type: str, inputs: list, attrs=None, n_out: int = 1):
    op = Operation(op_type, inputs, attrs, num_outputs=n_out)
    infer_types(_program(op, *[v for v in inputs if v is not None and v.const_value is None]))
    return [v.type for v in op.outputs]


def _const(name: str, values, dtype=np.int64) -> Value:
    a = np.asarray(values, dtype=dtype)
    return Value(name, TensorType(DataType.from_numpy(a.dtype), a.shape), a)


def test_every_module_of_rules_is_a_family():
    """A module of rules that inference does not import would leave its ops untyped, silently."""
    ir_dir = pathlib.Path(inference.__file__).parent
    with_rules = {p.stem for p in ir_dir.glob("infer_*.py") if "@inference(" in p.read_text()}
    assert with_rules == {m.__name__.rsplit(".", 1)[1] for m in FAMILIES}


def test_broadcast_symbolic_dims():
    assert broadcast_shapes(("N", 1, 4), (3, 1)) == ("N", 3, 4)
    assert broadcast_shapes(("N", 3), ("N", 1)) == ("N", 3)
    assert broadcast_shapes(("N",), ("M",)) == (None,)
    assert broadcast_shapes((None, 5), (7, 5)) == (7, 5)
    assert broadcast_shapes((None,), (1,)) == (None,)
    a = Value("a", TensorType(F32, ("batch", 1, 8)))
    b = Value("b", TensorType(F32, (4, 1)))
    assert _infer("Add", [a, b]) == [TensorType(F32, ("batch", 4, 8))]
    assert _infer("Less", [a, b]) == [TensorType(DataType.BOOL, ("batch", 4, 8))]


def test_conv_same_upper():
    x = Value("x", TensorType(F32, ("N", 3, 15, 16)))
    w = Value("w", TensorType(F32, (8, 3, 3, 3)))
    (y,) = _infer("Conv", [x, w], {"auto_pad": "SAME_UPPER", "strides": [2, 2]})
    assert y == TensorType(F32, ("N", 8, 8, 8))
    (y,) = _infer("Conv", [x, w], {"pads": [1, 1, 1, 1], "dilations": [2, 2]})
    assert y == TensorType(F32, ("N", 8, 13, 14))


def test_reshape_zero_and_minus_one():
    x = Value("x", TensorType(F32, ("N", 12, 64)))
    (y,) = _infer("Reshape", [x, _const("s", [0, -1])])
    assert y == TensorType(F32, ("N", 768))
    (y,) = _infer("Reshape", [x, _const("s", [-1, 4, 16])])
    assert y == TensorType(F32, (None, 4, 16))
    x = Value("x", TensorType(F32, (2, 3, 4)))
    (y,) = _infer("Reshape", [x, _const("s", [0, -1, 2])])
    assert y == TensorType(F32, (2, 6, 2))


def test_shape_values_flow_into_reshape():
    x = Value("x", TensorType(F32, ("N", 12, 64)))
    shape = Operation("Shape", [x])
    first = Operation("Gather", [shape.outputs[0], _const("zero", 0)])
    dims = Operation("Unsqueeze", [first.outputs[0], _const("ax", [0])])
    cat = Operation("Concat", [dims.outputs[0], _const("rest", [768])], {"axis": 0})
    reshape = Operation("Reshape", [x, cat.outputs[0]])
    block = Block("main", inputs=[x])
    for op in (shape, first, dims, cat, reshape):
        for v in op.inputs:
            if v.const_value is not None:
                block.constants[v.name] = v
        block.append(op)
    infer_types(Program({"main": Function("main", block)}))
    assert reshape.outputs[0].type == TensorType(F32, ("N", 768))


def test_unknown_op_and_untyped_inputs_give_none():
    x = Value("x", TensorType(F32, (2, 3)))
    assert _infer("NoSuchOp", [x]) == [None]
    assert _infer("Relu", [Value("u")]) == [None]
    assert _infer("Add", [Value("u"), Value("v")]) == [None]
    # One known operand still tells the element type, though not the shape.
    assert _infer("Add", [x, Value("u")]) == [TensorType(F32, None)]


def test_declared_types_are_kept():
    x = Value("x", TensorType(F32, (2, 3)))
    op = Operation("Relu", [x])
    declared = TensorType(F32, ("a", "b"))
    op.outputs[0].type = declared
    infer_types(_program(op, x))
    assert op.outputs[0].type is declared


def test_symbolic_shapes_through_an_imported_graph():
    """Shape → Gather → Concat → Reshape keeps symbolic dims; opset-11 Softmax is rewritten."""
    h = onnx.helper
    i64 = lambda name, vals: h.make_tensor(name, onnx.TensorProto.INT64, [len(vals)], vals)  # noqa: E731
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        h.make_node("Gather", ["s", "i1"], ["t"], axis=0),
        h.make_node("Concat", ["b", "t", "heads"], ["new_shape"], axis=0),
        h.make_node("Reshape", ["x", "new_shape"], ["split_heads"]),
        h.make_node("Transpose", ["split_heads"], ["bhtd"], perm=[0, 2, 1, 3]),
        h.make_node("MatMul", ["bhtd", "w"], ["scores"]),
        h.make_node("Softmax", ["scores"], ["probs"], axis=3),
    ]
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", "seq", 64])],
        [h.make_tensor_value_info("probs", onnx.TensorProto.FLOAT, None)],
        initializer=[
            i64("i0", [0]),
            i64("i1", [1]),
            i64("heads", [4, 16]),
            onnx.numpy_helper.from_array(np.zeros((16, 8), np.float32), "w"),
        ],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 11)])
    program = offload.load(model.SerializeToString())
    infer_types(program)
    values = {v.name: v for v in _produced(program.main.body)}
    assert values["split_heads"].type == TensorType(F32, ("batch", "seq", 4, 16))
    assert values["scores"].type == TensorType(F32, ("batch", 4, "seq", 8))
    assert program.main.outputs[0].type == TensorType(F32, ("batch", 4, "seq", 8))


def test_declared_unknown_rank_and_dims_are_refined():
    x = Value("x", TensorType(F32, (2, 3)))
    op = Operation("Relu", [x])
    op.outputs[0].type = TensorType(F32, None)
    infer_types(_program(op, x))
    assert op.outputs[0].type == TensorType(F32, (2, 3))
    op.outputs[0].type = TensorType(F32, (None, "n"))
    infer_types(_program(op, x))
    assert op.outputs[0].type == TensorType(F32, (2, "n"))
