"""ONNX import: structure, constants, external data, opset upgrades, and bad files."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.errors import DTypeError, ModelFixWarning, ModelFormatError, ShapeError, UnsupportedOpError
from offload.ir import DataType, TensorType


def _model(nodes, inputs, outputs, inits=(), opset=21, **kw):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    kw.setdefault("ir_version", 10)  # the newest onnxruntime reads
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw)


def _run_both(model, feeds):
    """offload's result and onnxruntime's, for the same model and inputs."""
    data = model.SerializeToString()
    got = offload.evaluate(offload.load(data), feeds)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    return list(got.values()), want


def _relu_model(**kw):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    return _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y], **kw)


def test_import_builds_typed_ssa_program():
    program = offload.load(_relu_model().SerializeToString())
    fn = program.main
    assert [v.name for v in fn.inputs] == ["x"]
    assert fn.inputs[0].type == TensorType(DataType.FLOAT, ("N", 4))
    (op,) = fn.body.operations
    assert op.op_type == "Relu" and op.inputs[0] is fn.inputs[0]
    assert fn.outputs[0].producer is op
    assert fn.inputs[0].users == [op]
    offload.ir.verify(program)


def test_load_sniffs_content_not_extension(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(_relu_model().SerializeToString())
    assert offload.load(path).main.body.operations[0].op_type == "Relu"
    tfl = tmp_path / "model.onnx"
    tfl.write_bytes(b"\x1c\x00\x00\x00TFL3" + b"\x00" * 32)
    with pytest.raises(ModelFormatError, match="tflite"):
        offload.load(tfl)


def test_initializers_constants_and_metadata():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    nodes = [
        helper.make_node("Constant", [], ["k"], value_float=2.0),
        helper.make_node("MatMul", ["w", "x"], ["m"]),
        helper.make_node("Mul", ["m", "k"], ["y"]),
    ]
    model = _model(nodes, [x], [y], [numpy_helper.from_array(w, "w")])
    helper.set_model_props(model, {"author": "tests"})
    program = offload.load(model.SerializeToString())
    assert program.metadata["author"] == "tests"
    assert set(program.main.body.constants) == {"w", "k"}
    np.testing.assert_array_equal(program.main.body.constants["w"].const_value, w)
    feeds = {"x": np.ones((3, 2), np.float32)}
    got, want = _run_both(model, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


def test_external_data_is_read_from_the_model_folder(tmp_path):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [y], [numpy_helper.from_array(w, "w")])
    path = str(tmp_path / "m.onnx")
    onnx.save_model(
        model,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="w.bin",
        size_threshold=0,
    )
    program = offload.load(path)
    np.testing.assert_array_equal(program.main.body.constants["w"].const_value, w)
    with open(path, "rb") as f, pytest.raises(ModelFormatError, match="needs the model loaded from a path"):
        offload.load(f.read())


@pytest.mark.parametrize(
    "location, offset, length, message",
    [
        ("../outside.bin", 0, 48, "outside the model's folder"),
        ("/etc/passwd", 0, 16, "outside the model's folder"),
        ("w.bin", 40, 48, "outside 'w.bin'"),
        ("w.bin", 0, 44, "needs 48"),
        ("missing.bin", 0, 48, "not found"),
    ],
)
def test_external_data_is_bounds_checked(tmp_path, location, offset, length, message):
    (tmp_path / "w.bin").write_bytes(np.zeros(12, np.float32).tobytes())
    (tmp_path.parent / "outside.bin").write_bytes(np.zeros(12, np.float32).tobytes())
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3, 4], data_location=TensorProto.EXTERNAL)
    for k, v in {"location": location, "offset": str(offset), "length": str(length)}.items():
        t.external_data.add(key=k, value=v)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [y], [t])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelFormatError, match=message):
        offload.load(path)


def test_truncated_files_raise_model_format_error():
    data = _model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.ones(4, np.float32), "w")],
    ).SerializeToString()
    for k in range(1, 64):
        cut = data[: len(data) * k // 64]
        with pytest.raises(ModelFormatError):
            offload.load(cut)


@pytest.mark.parametrize(
    "blob, message",
    [
        (b"", "empty"),
        (b"\xff\xff\xff\xff\xff\xff", "not a valid ONNX protobuf"),
        (b"\x08\x07", "no graph"),
    ],
)
def test_garbage_bytes(blob, message):
    with pytest.raises(ModelFormatError, match=message):
        offload.load(blob)


@pytest.mark.parametrize(
    "dims, message", [([-3, 2], "negative dimension"), ([1 << 20, 1 << 20], "exceed the limit")]
)
def test_bad_initializer_dims(dims, message):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=dims)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [y], [t])
    with pytest.raises(ModelFormatError, match=message):
        offload.load(model.SerializeToString())


def test_raw_data_size_must_match_shape():
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], raw_data=b"\x00" * 12)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [y], [t])
    with pytest.raises(ModelFormatError, match="raw data has 12 bytes"):
        offload.load(model.SerializeToString())


def test_cycles_and_use_before_definition():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    cycle = [
        helper.make_node("Add", ["x", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    with pytest.raises(ModelFormatError, match="'b' is used before it is defined"):
        offload.load(_model(cycle, [x], [y]).SerializeToString())
    later = [helper.make_node("Relu", ["t"], ["y"]), helper.make_node("Relu", ["x"], ["t"])]
    with pytest.raises(ModelFormatError, match="'t' is used before"):
        offload.load(_model(later, [x], [y]).SerializeToString())
    dup = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["y"])]
    with pytest.raises(ModelFormatError, match="defined twice"):
        offload.load(_model(dup, [x], [y]).SerializeToString())


def test_unknown_op_imports_and_fails_only_when_run():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")], "g", [x], [y]
    )
    model = helper.make_model(
        graph,
        ir_version=10,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.example", 1)],
    )
    program = offload.load(model.SerializeToString())
    assert program.main.body.operations[0].qualified_type == "com.example::Frobnicate"
    with pytest.raises(UnsupportedOpError, match=r"com\.example::Frobnicate"):
        offload.evaluate(program, {"x": np.zeros(2, np.float32)})


def test_inputs_are_checked_against_declared_types():
    program = offload.load(_relu_model().SerializeToString())
    with pytest.raises(DTypeError, match="'x' has dtype int32"):
        offload.evaluate(program, {"x": np.zeros((2, 4), np.int32)})
    with pytest.raises(ShapeError, match="'x' has shape"):
        offload.evaluate(program, {"x": np.zeros((2, 5), np.float32)})
    with pytest.raises(ShapeError, match="'x' is missing"):
        offload.evaluate(program, {})


@pytest.mark.parametrize(
    "opset, node, inits, shape",
    [
        (11, helper.make_node("Squeeze", ["x"], ["y"], axes=[1]), [], [3, 1, 4]),
        (11, helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0, 3]), [], [3, 4]),
        (11, helper.make_node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0), [], [3, 4]),
        (17, helper.make_node("ReduceMean", ["x"], ["y"], axes=[0]), [], [3, 4]),
        (11, helper.make_node("Split", ["x"], ["y", "z"], axis=1, split=[1, 3]), [], [3, 4]),
        (9, helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[3], axes=[1]), [], [3, 4]),
        (10, helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 0, 1], value=2.0), [], [3, 4]),
        (10, helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.5), [], [3, 4]),
        (12, helper.make_node("Softmax", ["x"], ["y"], axis=1), [], [2, 3, 4]),
        (12, helper.make_node("LogSoftmax", ["x"], ["y"]), [], [2, 3, 4]),
        (9, helper.make_node("TopK", ["x"], ["y", "i"], k=2), [], [3, 4]),
        (10, helper.make_node("Dropout", ["x"], ["y"], ratio=0.3), [], [3, 4]),
        (
            9,
            helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest"),
            [np.array([1, 1, 2, 3], np.float32)],
            [1, 1, 2, 2],
        ),
    ],
    ids=lambda p: p.op_type if hasattr(p, "op_type") else None,
)
def test_older_opsets_are_upgraded_to_latest_semantics(opset, node, inits, shape):
    """offload rewrites old versions at import; onnxruntime runs them natively: they must agree."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    outs = [onnx.ValueInfoProto(name=n) for n in node.output]
    init = [numpy_helper.from_array(a, n) for n, a in zip(node.input[1:], inits)]
    model = _model([node], [x], outs, init, opset=opset, ir_version=7)
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    got, want = _run_both(model, feeds)
    for g, w in zip(got, want):
        if node.op_type == "TopK" and g.dtype != np.float32:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_model_local_functions_are_inlined():
    fn = helper.make_function(
        "custom",
        "Scaled",
        ["a"],
        ["b"],
        [
            helper.make_node("Constant", [], ["two"], value_float=2.0),
            helper.make_node("Mul", ["a", "two"], ["b"]),
        ],
        [helper.make_opsetid("", 21)],
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    graph = helper.make_graph([helper.make_node("Scaled", ["x"], ["y"], domain="custom")], "g", [x], [y])
    model = helper.make_model(
        graph,
        ir_version=10,
        functions=[fn],
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("custom", 1)],
    )
    program = offload.load(model.SerializeToString())
    assert all(op.domain == "" for op in program.main.body.operations)
    out = offload.evaluate(program, {"x": np.array([1, 2, 3], np.float32)})
    np.testing.assert_array_equal(out["y"], [2, 4, 6])


def test_missing_default_opset_is_a_format_error():
    model = _relu_model()
    del model.opset_import[:]
    with pytest.raises(ModelFormatError, match="opset_import"):
        offload.load(model.SerializeToString())


def test_declared_types_must_agree_with_the_ops():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [2, 3])
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y])
    with pytest.raises(ModelFormatError, match=r"'%y' is declared .* but Relu gives fp32"):
        offload.load(model.SerializeToString())


def test_a_declared_shape_that_disagrees_is_a_hint_as_in_onnxruntime():
    """onnxruntime warns ("falling back to lenient merge") and runs with the inferred shapes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])  # a graph output, dims swapped
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y])
    feeds = {"x": np.arange(-3, 3, dtype=np.float32).reshape(2, 3)}
    with pytest.warns(ModelFixWarning, match=r"1 declared shape\(s\) disagree.*'y' declared \(3,2,fp32\)"):
        got, want = _run_both(model, feeds)
    assert got[0].shape == want[0].shape == (2, 3)
    np.testing.assert_array_equal(got[0], want[0])

    # a value_info of another rank, before the op whose shape depends on it
    t = helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, "seqlen"])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    shape = numpy_helper.from_array(np.array([1, 3, 2], np.int64), "s")
    nodes = [
        helper.make_node("Reshape", ["x", "s"], ["t"]),
        helper.make_node("Transpose", ["t"], ["u"], perm=[0, 2, 1]),
        helper.make_node("Relu", ["u"], ["out"]),
    ]
    model = _model(nodes, [x], [out], [shape])
    model.graph.value_info.append(t)
    with pytest.warns(ModelFixWarning, match=r"'t' declared \(1,seqlen,fp32\), inferred \(1,3,2,fp32\)"):
        got, want = _run_both(model, feeds)
        program = offload.load(model.SerializeToString())
    assert program.main.outputs[0].type == TensorType(DataType.FLOAT, (1, 2, 3))
    np.testing.assert_array_equal(got[0], want[0])


def test_a_declared_output_shape_inference_cannot_confirm_is_dropped_as_in_onnxruntime():
    """A scalar declared for Squeeze(no axes) of a (N, 1) value, true at batch 1 only (a speech
    quality scorer's output): onnxruntime returns (2,) at batch 2, and so do the planned runs
    that follow the first at that shape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    nodes = [helper.make_node("Squeeze", ["x"], ["s"]), helper.make_node("Sigmoid", ["s"], ["y"])]
    data = _model(nodes, [x], [y], opset=13).SerializeToString()
    with pytest.warns(ModelFixWarning, match=r"1 declared output shape\(s\) .*'y' declared \(fp32\)"):
        program = offload.load(data)
    assert program.main.outputs[0].type == TensorType(DataType.FLOAT, None)
    module = offload.runtime.load(offload.save(program))
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for batch in (2, 2, 2, 1, 1, 2):
        feeds = {"x": np.linspace(-2, 2, batch, dtype=np.float32).reshape(batch, 1)}
        (want,) = session.run(None, feeds)
        got = module.run(feeds)["y"]
        assert got.shape == want.shape == ((batch,) if batch > 1 else ())
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_subgraph_may_shadow_an_outer_name_as_in_onnxruntime():
    """ONNX scoping: a Loop body's initializer and node output reuse names of the outer graph;
    inside the body the inner values are meant, outside the outer ones."""
    w_outer = numpy_helper.from_array(np.array([10.0], np.float32), "w")
    w_inner = numpy_helper.from_array(np.array([2.0], np.float32), "w")
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["acc_in", "w"], ["y"]),  # the inner w (2) and an inner y
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]),
        ],
        [w_inner],
    )
    trips = numpy_helper.from_array(np.array(3, np.int64), "n")
    cond = numpy_helper.from_array(np.array(True), "c")
    nodes = [
        helper.make_node("Loop", ["n", "c", "x"], ["looped"], body=body),
        helper.make_node("Mul", ["looped", "w"], ["y"]),  # the outer w (10) and the outer y
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    model = _model(nodes, [x], [y], [w_outer, trips, cond])
    with pytest.warns(ModelFixWarning, match=r"1 subgraph name\(s\) shadow .*\('w'\)"):
        got, want = _run_both(model, {"x": np.array([1.5], np.float32)})
    np.testing.assert_array_equal(want[0], [1.5 * 8 * 10])
    np.testing.assert_array_equal(got[0], want[0])


def test_a_dim_value_of_minus_one_is_an_unknown_dim_and_runs_as_onnxruntime_runs_it():
    # Several exporters write dim_value -1 for "unknown"; onnxruntime accepts any size there.
    import onnxruntime as ort

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3])
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y])
    program = offload.load(model.SerializeToString())
    assert program.main.body.inputs[0].type.shape == (None, 3)
    feeds = {"x": np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    np.testing.assert_array_equal(offload.evaluate(program, feeds)["y"], want[0])
    model.graph.input[0].type.tensor_type.shape.dim[
        0
    ].dim_value = -2  # not the exporters' "unknown": still malformed
    with pytest.raises(ModelFormatError, match="negative dimension -2"):
        offload.load(model.SerializeToString())
