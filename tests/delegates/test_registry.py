"""The backend registry and the example plugin: found by entry point, broken plugins reported,
`offload backends`, and the example backend's results equal to the CPU evaluator's bit for bit
and near onnxruntime's."""

import importlib.metadata
import json
import subprocess
import sys
import weakref

import numpy as np
import pytest
from offload_example_backend import backend as example_backend
from offload_example_backend import runtime as example_runtime
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.cli import main
from offload.delegates import Backend, CompileSpec, registry
from offload.errors import BackendUnavailableError, UnsupportedOpError
from tests.reference import assert_close, onnxruntime_outputs, reduction_terms, sum_tolerance

F = TensorProto.FLOAT


def make_backend():
    """A zero-argument factory, as an entry point may name instead of a Backend."""
    return Backend("factory", example_backend.compiler, example_backend.runtime)


def _ep(name, value):
    return importlib.metadata.EntryPoint(name, value, registry.GROUP)


@pytest.fixture
def plugins(monkeypatch):
    """Replace the installed plugins by the given fake entry points (the real ones kept)."""

    def install(*fakes):
        real = registry._entry_points()
        monkeypatch.setattr(registry, "_entry_points", lambda: [*real, *fakes])
        monkeypatch.setattr(registry, "_entries", None)

    return install


# ------------------------------------------------------------------ registry


def test_example_is_found_through_its_entry_point():
    entry = next(e for e in registry.backends() if e.name == "example")
    assert entry.source.startswith("offload-example-backend ")
    assert entry.error is None and entry.backend is example_backend
    assert registry.get("example") is example_backend
    assert registry.find("example") is example_backend


def test_unknown_backend_names_the_known_ones():
    assert registry.find("warp-drive") is None
    with pytest.raises(
        BackendUnavailableError, match=r"no backend named 'warp-drive' \(known backends: .*example"
    ):
        registry.get("warp-drive")


@pytest.mark.parametrize(
    "value, error",
    [
        ("no_such_plugin_module:backend", "ModuleNotFoundError: No module named 'no_such_plugin_module'"),
        ("os:sep", "TypeError: 'os:sep' is a str, not an offload Backend"),
        (
            "offload_example_backend:backend",
            "ValueError: entry point 'broken' gives a backend named 'example'",
        ),
    ],
)
def test_a_broken_plugin_is_reported_not_fatal(plugins, value, error):
    plugins(_ep("broken", value))
    entry = next(e for e in registry.backends() if e.name == "broken")
    assert entry.backend is None and entry.error == error
    assert registry.find("broken") is None
    with pytest.raises(BackendUnavailableError, match=r"backend 'broken' .* failed to load"):
        registry.get("broken")
    assert registry.get("example") is example_backend  # the others still load


def test_a_plugin_may_name_a_factory(plugins):
    plugins(_ep("factory", "tests.delegates.test_registry:make_backend"))
    assert registry.get("factory").name == "factory"


def test_a_second_plugin_of_a_taken_name_is_refused(plugins):
    plugins(_ep("example", "offload_example_backend:backend"))
    entries = [e for e in registry.backends() if e.name == "example"]
    assert len(entries) == 2 and entries[0].backend is example_backend
    assert "already taken by offload-example-backend" in entries[1].error
    assert registry.get("example") is example_backend


def test_cli_backends_lists_example_its_ops_and_broken_plugins(plugins, capsys):
    plugins(_ep("broken", "no_such_plugin_module:backend"))
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "example  (offload-example-backend " in out
    assert "available here: yes" in out
    for line in ("op type", "Conv ", "MatMul ", "Softmax "):
        assert line in out
    assert "auto_pad in ['NOTSET']" in out
    assert "broken plugins:" in out and "No module named 'no_such_plugin_module'" in out


def test_cli_backends_says_why_a_backend_is_unavailable(monkeypatch, capsys):
    monkeypatch.setenv(example_runtime.DISABLE_VAR, "1")
    assert main(["backends"]) == 0
    assert "available here: no (disabled by OFFLOAD_EXAMPLE_BACKEND_DISABLE=1)" in capsys.readouterr().out


# ------------------------------------------------------------------ the example backend


def test_example_capabilities_name_real_ops_kernels_and_attributes():
    for op_type, cap in example_backend.compiler().capabilities.items():
        schema = offload.ir.lookup("", op_type)
        assert schema is not None and offload.runtime.kernels.find("", op_type) is not None, op_type
        assert set(cap.attributes) <= set(schema.attributes), op_type


def test_example_runtime_does_not_import_its_compiler():
    code = (
        "import sys, offload_example_backend as b; b.backend.runtime(); "
        "assert 'offload_example_backend.compiler' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


_ONNX: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # program → its ONNX model's bytes


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])
    program = offload.load(model.SerializeToString())
    _ONNX[program] = model.SerializeToString()
    return program


def _small_program():
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((6, 4)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([3, 8], np.int64), "shape")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("LeakyRelu", ["m"], ["l"], alpha=0.2),
        helper.make_node("Transpose", ["l"], ["t"], perm=[1, 0]),
        helper.make_node("Concat", ["t", "t"], ["c"], axis=1),
        helper.make_node("Reshape", ["c", "shape"], ["r"]),
        helper.make_node("Softmax", ["r"], ["y"], axis=1),
    ]
    x = helper.make_tensor_value_info("x", F, [3, 6])
    y = helper.make_tensor_value_info("y", F, [3, 8])
    return _model(nodes, [x], [y], [w, shape]), {"x": rng.standard_normal((3, 6)).astype(np.float32)}


def _run_example(program, feeds, specs=()):
    """preprocess → init → execute, as offload.to_backend and the runtime will call them."""
    body = program.main.body
    result = example_backend.compiler().preprocess(program, list(specs))
    rt = example_backend.runtime()
    weights = {v.name: v.const_value for v in body.constants.values()}
    handle = rt.init(result.processed, list(specs), weights)
    try:
        outputs = rt.execute(handle, [feeds[v.name] for v in body.inputs])
    finally:
        rt.destroy(handle)
    return dict(zip([v.name for v in body.outputs], outputs)), result


def _assert_bitwise_equal(got: dict, want: dict):
    assert got.keys() == want.keys()
    for name in want:
        a, b = np.asarray(got[name]), np.asarray(want[name])
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), name


def test_example_round_trip_equals_evaluate_bit_for_bit():
    program, feeds = _small_program()
    got, result = _run_example(program, feeds)
    _assert_bitwise_equal(got, offload.evaluate(program, feeds))
    # and near onnxruntime: a sum of 6 products, then the softmax's 8 terms
    for name, want in onnxruntime_outputs(_ONNX[program], feeds).items():
        assert_close(got[name], want, rtol=sum_tolerance(np.float32, 6 + 8), err_msg=name)
    plan = json.loads(result.processed)
    assert [op["type"] for op in plan["ops"]] == [
        "MatMul",
        "LeakyRelu",
        "Transpose",
        "Concat",
        "Reshape",
        "Softmax",
    ]
    assert sorted(plan["weights"].values()) == ["shape", "w"]
    assert plan["ops"][1]["attributes"] == {"alpha": float(np.float32(0.2))}  # ONNX floats are float32


def test_example_runs_the_bundled_cnn_bit_for_bit(example_model):
    program = offload.load(example_model)
    rng = np.random.default_rng(0)
    feeds = {"image": rng.standard_normal(program.main.inputs[0].type.shape).astype(np.float32)}
    got, _ = _run_example(program, feeds)
    _assert_bitwise_equal(got, offload.evaluate(program, feeds))
    for name, want in onnxruntime_outputs(example_model, feeds).items():
        assert_close(
            got[name], want, rtol=sum_tolerance(np.float32, reduction_terms(example_model)), err_msg=name
        )


def test_example_trace_spec_records_the_ops_it_ran(monkeypatch):
    monkeypatch.setattr(example_runtime, "TRACE", [])
    program, feeds = _small_program()
    _run_example(program, feeds)
    assert example_runtime.TRACE == []  # off by default
    _run_example(program, feeds, [CompileSpec.of("trace", True)])
    assert example_runtime.TRACE == ["MatMul", "LeakyRelu", "Transpose", "Concat", "Reshape", "Softmax"]


def test_example_is_unavailable_when_disabled(monkeypatch):
    rt = example_backend.runtime()
    assert rt.is_available()
    monkeypatch.setenv(example_runtime.DISABLE_VAR, "1")
    availability = rt.is_available()
    assert not availability and "OFFLOAD_EXAMPLE_BACKEND_DISABLE=1" in availability.reason


def _relu(elem):
    x, y = helper.make_tensor_value_info("x", elem, [2]), helper.make_tensor_value_info("y", elem, [2])
    return _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y])


def test_example_refuses_what_its_table_or_a_json_plan_cannot_hold():
    compiler = example_backend.compiler()
    program = _relu(TensorProto.DOUBLE)
    assert compiler.supports(program.main.body.operations[0]).reason == "dtype fp64 of 'x' is not supported"
    with pytest.raises(UnsupportedOpError, match="example backend: op 'Relu': dtype fp64"):
        compiler.preprocess(program, [])
    op = _relu(F).main.body.operations[0]
    op.attributes["table"] = np.zeros(2, np.float32)  # a tensor attribute has no JSON form
    assert "'table' is a tensor or graph" in compiler.supports(op).reason
