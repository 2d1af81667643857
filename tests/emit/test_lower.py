"""The lowering to .pte: plan structure, values table, KernelCall layout, If/Loop jumps, sub-plans."""

import json
import os
import struct

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import offload
from offload.emit import lower
from offload.errors import UnsupportedOpError
from offload.ir import Block, DataType, Function, Operation, Program, TensorType, Value
from offload.schemas import pte
from offload.schemas.generated.executorch_flatbuffer.InstructionArguments import InstructionArguments as IA
from offload.schemas.generated.executorch_flatbuffer.KernelTypes import KernelTypes as K
from offload.schemas.generated.executorch_flatbuffer.TensorShapeDynamism import TensorShapeDynamism

vi = helper.make_tensor_value_info


def _program(nodes, inputs, outputs, inits=(), opset=21):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])
    return offload.load(model.SerializeToString())


def _plans(program, **kw):
    """The plans as written and parsed back (what a reader of the file sees)."""
    program_t, segments = lower(program, **kw)
    return pte.parse(pte.serialize(program_t, segments)).program.executionPlan


def _kernels(plan):
    """(operator name, args) of each KernelCall, in chain order."""
    out = []
    for ins in plan.chains[0].instructions:
        if ins.instrArgsType == IA.KernelCall:
            out.append((plan.operators[ins.instrArgs.opIndex].name, [int(a) for a in ins.instrArgs.args]))
    return out


def _kinds(plan):
    return [ins.instrArgsType for ins in plan.chains[0].instructions]


def _conv_program():
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    return _program(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")],
        [vi("x", T.FLOAT, [1, 3, 8, 8])],
        [vi("y", T.FLOAT, [1, 4, 8, 8])],
        [w],
    )


def test_conv_kernel_call_lays_out_inputs_attributes_outputs():
    (plan,) = _plans(_conv_program())
    assert plan.name == "forward"
    assert [o.name for o in plan.operators] == ["onnx::Conv"]
    ((_, args),) = _kernels(plan)
    values = plan.values
    # X, W, B (omitted: Null), six attributes in schema order, Y.
    assert len(args) == 3 + 6 + 1
    x, w, b = args[:3]
    assert (
        b == 0 and values[0].valType == K.Null and values[1].valType == K.Bool and not values[1].val.boolVal
    )
    assert values[w].val.dataBufferIdx >= 1 and values[w].val.allocationInfo is None
    auto_pad, dilations, group, kernel_shape, pads, strides = args[3:9]
    assert values[auto_pad].val.stringVal == "NOTSET"
    assert dilations == 0 and kernel_shape == 0 and strides == 0  # absent, no default
    assert values[group].valType == K.Int and values[group].val.intVal == 1
    assert list(values[pads].val.items) == [1, 1, 1, 1]
    y = args[9]
    assert plan.inputs.tolist() == [x] and plan.outputs.tolist() == [y]


def test_values_table_sections_come_in_order():
    (plan,) = _plans(_conv_program())
    ((_, args),) = _kernels(plan)
    x, w, y = args[0], args[1], args[9]
    attrs = [a for a in args[3:9] if a]
    assert 1 < w < x < y < min(attrs)


def test_tensor_fields_follow_the_ir_types():
    program = _program(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"])],
        [vi("x", T.FLOAT, ["batch", 3])],
        [vi("s", T.INT64, [2])],
    )
    (plan,) = _plans(program)
    values = plan.values
    x = values[int(plan.inputs[0])].val
    assert x.scalarType == 6 and list(x.sizes) == [-1, 3] and list(x.dimOrder) == [0, 1]
    assert x.shapeDynamism == TensorShapeDynamism.DYNAMIC_UNBOUND and x.allocationInfo is None
    assert x.extraTensorInfo.fullyQualifiedName == "x"
    s = values[int(plan.outputs[0])].val
    assert s.scalarType == 4 and list(s.sizes) == [2] and s.shapeDynamism == TensorShapeDynamism.STATIC
    assert s.allocationInfo.memoryId == 1 and s.allocationInfo.memoryOffsetLow % 16 == 0
    assert json.loads(plan.containerMetaType.encodedInpStr) == ["x"]
    assert json.loads(plan.containerMetaType.encodedOutStr) == ["s"]
    assert plan.nonConstBufferSizes.tolist()[0] == 0 and plan.nonConstBufferSizes.tolist()[1] >= 16


def test_unknown_type_is_dynamic_with_unknown_rank():
    body = Block("main")
    v = Value("x", TensorType(DataType.FLOAT, None))
    body.inputs.append(v)
    op = body.append(Operation("Relu", [v], output_names=["y"]))
    body.outputs.append(op.outputs[0])
    (plan,) = _plans(Program({"forward": Function("forward", body)}))
    y = plan.values[int(plan.outputs[0])].val
    assert (
        y.sizes is None
        and y.shapeDynamism == TensorShapeDynamism.DYNAMIC_UNBOUND
        and y.allocationInfo is None
    )


def test_if_becomes_two_jumps_and_moves():
    then_b = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", T.FLOAT, [2])])
    else_b = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e", T.FLOAT, [2])])
    program = _program(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
        [vi("c", T.BOOL, []), vi("x", T.FLOAT, [2])],
        [vi("y", T.FLOAT, [2])],
    )
    (plan,) = _plans(program)
    ins = plan.chains[0].instructions
    assert _kinds(plan) == [
        IA.JumpFalseCall,
        IA.KernelCall,
        IA.MoveCall,
        IA.JumpFalseCall,
        IA.KernelCall,
        IA.MoveCall,
    ]
    c, y = int(plan.inputs[0]), int(plan.outputs[0])
    assert ins[0].instrArgs.condValueIndex == c and ins[0].instrArgs.destinationInstruction == 4
    assert ins[3].instrArgs.condValueIndex == 1 and ins[3].instrArgs.destinationInstruction == 6
    assert ins[2].instrArgs.moveTo == y and ins[5].instrArgs.moveTo == y
    assert [o.name for o in plan.operators] == ["onnx::Neg", "onnx::Abs"]


def _loop_program(scan=True):
    body = helper.make_graph(
        [
            helper.make_node("Add", ["a", "one"], ["a2"]),
            helper.make_node("Identity", ["c"], ["c2"]),
            helper.make_node("Identity", ["a"], ["s"]),
        ],
        "body",
        [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("a", T.FLOAT, [2])],
        [vi("c2", T.BOOL, []), vi("a2", T.FLOAT, [2])] + ([vi("s", T.FLOAT, [2])] if scan else []),
    )
    one = numpy_helper.from_array(np.ones(2, np.float32), "one")
    return _program(
        [helper.make_node("Loop", ["M", "cond", "a0"], ["ra", "rs"] if scan else ["ra"], body=body)],
        [vi("M", T.INT64, []), vi("cond", T.BOOL, []), vi("a0", T.FLOAT, [2])],
        [vi("ra", T.FLOAT, [2])] + ([vi("rs", T.FLOAT, None)] if scan else []),
        [one],
    )


def test_loop_becomes_a_guarded_back_jump():
    (plan,) = _plans(_loop_program())
    ins = plan.chains[0].instructions
    names = [n for n, _ in _kernels(plan)]
    assert names == [
        "onnx::SequenceEmpty",
        "onnx::Less",
        "onnx::And",
        "onnx::Add",
        "onnx::Identity",
        "onnx::Identity",
        "onnx::SequenceInsert",
        "onnx::Add",
        "offload::StackSequence",
    ]
    jumps = [(pc, i.instrArgs) for pc, i in enumerate(ins) if i.instrArgsType == IA.JumpFalseCall]
    (exit_pc, exit_jump), (back_pc, back_jump) = jumps
    head = back_jump.destinationInstruction
    assert back_jump.condValueIndex == 1 and head < exit_pc < back_pc
    assert exit_jump.destinationInstruction == back_pc + 1
    # The guard: Less(iter, M) then And(go, cond_in), right before the exit jump.
    assert (
        ins[head].instrArgsType == IA.KernelCall
        and plan.operators[ins[head].instrArgs.opIndex].name == "onnx::Less"
    )
    stack = next(a for n, a in _kernels(plan) if n == "offload::StackSequence")
    dtype, shape = plan.values[stack[1]], plan.values[stack[2]]
    assert dtype.val.intVal == int(DataType.FLOAT) and list(shape.val.items) == [2]
    assert stack[3] == int(plan.outputs[1])


def test_loop_without_trip_count_or_condition_is_refused():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c2"])],
        "body",
        [vi("i", T.INT64, []), vi("c", T.BOOL, [])],
        [vi("c2", T.BOOL, [])],
    )
    program = _program(
        [helper.make_node("Loop", ["", ""], [], body=body)], [vi("x", T.FLOAT, [1])], [vi("x", T.FLOAT, [1])]
    )
    with pytest.raises(UnsupportedOpError, match="neither a trip count M nor a condition"):
        lower(program)


def test_op_without_schema_is_refused():
    body = Block("main")
    x = Value("x", TensorType(DataType.FLOAT, (2,)))
    body.inputs.append(x)
    op = body.append(Operation("Frobnicate", [x], domain="com.example", name="f", output_names=["y"]))
    body.outputs.append(op.outputs[0])
    with pytest.raises(UnsupportedOpError, match=r"op 'f' \(com.example::Frobnicate\): the op has no schema"):
        lower(Program({"forward": Function("forward", body)}))


def test_scan_body_becomes_a_sub_plan_with_captured_values():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Mul", ["s2", "k"], ["y"])],
        "body",
        [vi("s", T.FLOAT, [2]), vi("x", T.FLOAT, [2])],
        [vi("s2", T.FLOAT, [2]), vi("y", T.FLOAT, [2])],
    )
    program = _program(
        [helper.make_node("Scan", ["s0", "xs"], ["sf", "ys"], body=body, num_scan_inputs=1, name="scan")],
        [vi("s0", T.FLOAT, [2]), vi("xs", T.FLOAT, [3, 2]), vi("k", T.FLOAT, [2])],
        [vi("sf", T.FLOAT, [2]), vi("ys", T.FLOAT, [3, 2])],
    )
    main, sub = _plans(program)
    assert sub.name == "forward/scan/body"
    ((name, args),) = _kernels(main)
    assert name == "onnx::Scan"
    graph = main.values[args[2]]  # inputs (2), then body is the first attribute
    k = int(main.inputs[2])
    assert graph.valType == K.IntList and list(graph.val.items) == [1, k]
    assert json.loads(sub.containerMetaType.encodedInpStr) == ["s", "x", "k"]
    assert json.loads(sub.containerMetaType.encodedOutStr) == ["s2", "y"]


def test_variadic_inputs_and_outputs_name_the_input_count():
    r = numpy_helper.from_array(np.array(0.1, np.float32), "r")
    t = numpy_helper.from_array(np.array(0, np.int64), "t")
    graph = helper.make_graph(
        [
            helper.make_node(
                "Adagrad", ["r", "t", "x", "g", "h"], ["x2", "h2"], domain="ai.onnx.preview.training"
            )
        ],
        "g",
        [vi("x", T.FLOAT, [2]), vi("g", T.FLOAT, [2]), vi("h", T.FLOAT, [2])],
        [vi("x2", T.FLOAT, [2]), vi("h2", T.FLOAT, [2])],
        initializer=[r, t],
    )
    model = helper.make_model(
        graph,
        ir_version=10,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.preview.training", 1)],
    )
    (plan,) = _plans(offload.load(model.SerializeToString()))
    assert [(o.name, o.overload) for o in plan.operators] == [("ai.onnx.preview.training::Adagrad", "in5")]


def test_constant_data_is_raw_little_endian_and_aligned():
    strings = np.array(["a", "héllo", ""], dtype=object)
    halves = np.arange(5, dtype=np.float16)
    body = Block("main")
    s = body.add_constant("s", strings)
    h = body.add_constant("h", halves)
    body.outputs += [s, h]
    program_t, segments = lower(Program({"forward": Function("forward", body)}), constant_alignment=64)
    (data,) = segments
    offsets = program_t.constantSegment.offsets
    assert offsets[0] == 0 and all(o % 64 == 0 for o in offsets)
    by_name = {
        e.val.extraTensorInfo.fullyQualifiedName: e.val
        for e in program_t.executionPlan[0].values
        if e.valType == K.Tensor
    }
    start = offsets[by_name["s"].dataBufferIdx]
    want = struct.pack("<I", 3) + b"".join(struct.pack("<I", len(x.encode())) + x.encode() for x in strings)
    assert data[start : start + len(want)] == want
    assert by_name["s"].scalarType == pte.SCALAR_TYPES["STRING"]
    start = offsets[by_name["h"].dataBufferIdx]
    assert data[start : start + 10] == halves.astype("<f2").tobytes()


def test_save_returns_bytes_or_writes_a_file(tmp_path):
    program = _conv_program()
    data = offload.save(program)
    assert data[4:8] == b"ET12"
    path = tmp_path / "conv.pte"
    assert offload.save(program, path) is None
    assert path.read_bytes() == data
    assert os.path.getsize(path) == len(data)
