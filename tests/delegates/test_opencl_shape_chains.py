"""Shape arithmetic the GPU backends fold on the host: a Pad whose pads an exporter computes from
the input's rank (PyTorch's F.pad: ConstantOfShape, Concat, Reshape, a reversing Slice, Transpose,
Reshape, Cast) is decided by shapes alone, so it runs on the device at every input size."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import offload
from offload import runtime
from tests.delegates.opencl_support import needs_opencl

pytestmark = needs_opencl

I64 = TensorProto.INT64


def _pad_model():
    consts = {
        "pad": np.array([1, 2, 3, 0], np.int64),  # (left, right) of W, then of H, as F.pad takes
        "two": np.array(2, np.int64),
        "n": np.array(4, np.int64),
        "rows": np.array([-1, 2], np.int64),
        "start": np.array([-1], np.int64),
        "end": np.array([-(2**62)], np.int64),
        "axis": np.array([0], np.int64),
        "step": np.array([-1], np.int64),
        "flat": np.array([-1], np.int64),
    }
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Size", ["shape"], ["rank"]),
        helper.make_node("Mul", ["rank", "two"], ["twice"]),
        helper.make_node("Sub", ["twice", "n"], ["rest"]),
        helper.make_node("Unsqueeze", ["rest", "axis"], ["rest1"]),
        helper.make_node(
            "ConstantOfShape", ["rest1"], ["zeros"], value=numpy_helper.from_array(np.zeros(1, np.int64))
        ),
        helper.make_node("Concat", ["pad", "zeros"], ["all"], axis=0),
        helper.make_node("Reshape", ["all", "rows"], ["pairs"]),
        helper.make_node("Slice", ["pairs", "start", "end", "axis", "step"], ["reversed"]),
        helper.make_node("Transpose", ["reversed"], ["onnx_order"], perm=[1, 0]),
        helper.make_node("Reshape", ["onnx_order", "flat"], ["pads"]),
        helper.make_node("Cast", ["pads"], ["pads64"], to=I64),
        helper.make_node("Pad", ["x", "pads64"], ["padded"]),
        helper.make_node("Relu", ["padded"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    data = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])
    return data.SerializeToString()


def test_pads_computed_from_the_rank_run_on_opencl_at_two_sizes(tmp_path):
    data = _pad_model()
    program = offload.load(data)
    lowered = offload.to_backend(program, "opencl", passes="none")
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    offload.save(lowered, tmp_path / "m.pte")
    module = runtime.load(str(tmp_path / "m.pte"), strict=True)
    import onnxruntime as ort

    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for h, w in ((6, 7), (9, 5)):
        x = np.random.default_rng(h).standard_normal((1, 3, h, w)).astype(np.float32)
        (want,) = session.run(None, {"x": x})
        got = module.run({"x": x})["y"]
        assert got.shape == want.shape == (1, 3, h + 3, w + 3)
        np.testing.assert_array_equal(got, want)
