"""The evaluator's contract: kernel errors name the op, random kernels keep their promises."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload.errors import KernelError
from offload.runtime import kernels


def _load(nodes, inputs, outputs, opset=21):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])
    return offload.load(model.SerializeToString())


def test_a_failing_kernel_is_reported_with_op_and_input_shapes():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    program = _load([helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")], [x, s], [y])
    with pytest.raises(
        KernelError, match=r"op 'bad_reshape' \(Reshape\) failed on inputs \(float32\[2, 3\], int64\[1\]\)"
    ):
        offload.evaluate(program, {"x": np.zeros((2, 3), np.float32), "s": np.array([4], np.int64)})


def test_every_schema_op_used_by_models_has_a_kernel():
    """The kernel table is printable data: every registered kernel names a known op."""
    table = kernels.all_kernels()
    assert len(table) > 200
    unknown = [k for k in table if offload.ir.lookup(*k) is None]
    assert unknown == [], unknown


def test_a_kernel_module_that_fails_to_import_is_an_error_naming_it(monkeypatch):
    """A kernel module that cannot be imported raises at lookup, every time, never leaving its ops
    silently without kernels."""
    monkeypatch.setattr(kernels, "_MODULES", (*kernels._MODULES, "no_such_family"))
    monkeypatch.setattr(kernels, "_loaded", False)
    for _ in range(2):
        with pytest.raises(ImportError, match=r"offload\.runtime\.kernels\.no_such_family"):
            kernels.find("", "Relu")


def _bernoulli(seed):
    x = helper.make_tensor_value_info("p", TensorProto.FLOAT, [200, 500])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [200, 500])
    attrs = {} if seed is None else {"seed": seed}
    return _load([helper.make_node("Bernoulli", ["p"], ["y"], **attrs)], [x], [y])


def test_bernoulli_draws_with_the_given_probabilities_and_seed():
    p = np.tile(np.linspace(0, 1, 500, dtype=np.float32), (200, 1))
    a = offload.evaluate(_bernoulli(3.0), {"p": p})["y"]
    b = offload.evaluate(_bernoulli(3.0), {"p": p})["y"]
    np.testing.assert_array_equal(a, b)  # a fresh program with the same seed repeats itself
    assert a.dtype == np.float32 and set(np.unique(a)) <= {0.0, 1.0}
    assert a[:, 0].sum() == 0 and a[:, -1].sum() == 200  # p = 0 and p = 1 are certain
    # Column means estimate p: 200 draws each, averaged over bands of 50 columns.
    means = a.reshape(200, 10, 50).mean(axis=(0, 2))
    np.testing.assert_allclose(means, p[0].reshape(10, 50).mean(axis=1), atol=0.02)


def test_random_uniform_like_respects_range_dtype_and_shape():
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1000])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1000])
    program = _load(
        [
            helper.make_node(
                "RandomUniformLike", ["x"], ["y"], low=-2.0, high=3.0, seed=1.0, dtype=TensorProto.FLOAT
            )
        ],
        [x],
        [y],
    )
    out = offload.evaluate(program, {"x": np.zeros(1000)})["y"]
    assert out.dtype == np.float32 and out.shape == (1000,)
    assert out.min() >= -2.0 and out.max() < 3.0 and abs(out.mean() - 0.5) < 0.15
