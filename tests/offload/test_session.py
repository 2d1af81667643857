"""offload.InferenceSession against onnxruntime's session (and LiteRT for a TFLite model): the
same calls on both, names, shapes, types and values compared."""

import os
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import offload
from offload.delegates import registry
from offload.delegates.backend import Availability
from offload.errors import BackendUnavailableError, ModelFormatError, OffloadError
from tests.delegates.opencl_support import needs_opencl
from tests.models import fixtures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TFLITE = os.path.join(ROOT, "tests", "frontends", "tflite", "cnn_f32.tflite")
MODELS = ["cnn_classifier", "transformer_encoder", "lstm_model", "gru_model", "control_flow"]


def _described(args) -> list[tuple]:
    return [(a.name, a.shape, a.type) for a in args]


def _same_as_onnxruntime(session, model: str, feeds: dict, rtol=1e-4, atol=1e-5) -> None:
    want_session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert _described(session.get_inputs()) == _described(want_session.get_inputs())
    assert _described(session.get_outputs()) == _described(want_session.get_outputs())
    names = [o.name for o in want_session.get_outputs()]
    for asked in (None, names[::-1], names[-1:]):
        got = session.run(asked, feeds)
        want = want_session.run(asked, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", MODELS)
def test_cpu_session_matches_onnxruntime(name):
    session = offload.InferenceSession(fixtures.path(name), providers=["CPUExecutionProvider"])
    assert session.get_providers() == ["cpu"]
    _same_as_onnxruntime(session, fixtures.path(name), fixtures.inputs(name, 1, np.random.default_rng(1)))


@needs_opencl
@pytest.mark.parametrize("name", ["cnn_classifier", "gru_model"])
def test_opencl_session_matches_onnxruntime(name):
    session = offload.InferenceSession(fixtures.path(name), providers=[("opencl", {"max_shapes": "2"})])
    assert session.get_providers() == ["opencl", "cpu"]
    for case in range(fixtures.CASES[name]):
        _same_as_onnxruntime(
            session, fixtures.path(name), fixtures.inputs(name, case, np.random.default_rng(case))
        )


def test_example_session_from_bytes_and_from_its_pte(example_model, tmp_path):
    x = {"image": np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    with open(example_model, "rb") as f:
        data = f.read()
    session = offload.InferenceSession(data)
    _same_as_onnxruntime(session, example_model, x)
    meta = session.get_modelmeta()
    want = ort.InferenceSession(example_model, providers=["CPUExecutionProvider"]).get_modelmeta()
    assert (meta.producer_name, meta.graph_name) == (want.producer_name, want.graph_name)
    pte = tmp_path / "tiny.pte"
    offload.save(offload.load(example_model), pte)
    from_pte = offload.InferenceSession(str(pte))
    _same_as_onnxruntime(from_pte, example_model, x)  # its shapes are static: nothing lost
    assert from_pte.get_providers() == ["cpu"]


def test_tflite_session_matches_litert():
    from tests.frontends.tflite.litert import litert

    with open(TFLITE, "rb") as f:
        data = f.read()
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=data)
    session = offload.InferenceSession(TFLITE)
    details = interp.get_input_details()
    assert [i.name for i in session.get_inputs()] == [d["name"] for d in details]
    assert [i.name for i in session.get_outputs()] == [d["name"] for d in interp.get_output_details()]
    for arg, d in zip(session.get_inputs(), details):
        assert arg.type == "tensor(float)" and d["dtype"] == np.float32
        # a dim LiteRT leaves open (-1) is a symbol, as onnxruntime names an open dim
        assert [-1 if isinstance(s, str) else s for s in arg.shape] == list(d["shape_signature"])
    feeds = {
        d["name"]: np.random.default_rng(4).standard_normal(d["shape"]).astype(np.float32) for d in details
    }
    want = litert(data, feeds)
    got = session.run(None, feeds)
    for arg, g in zip(session.get_outputs(), got):
        np.testing.assert_allclose(g, want[arg.name], rtol=1e-5, atol=1e-5)


def test_a_provider_that_cannot_run_here_is_left_out_with_a_warning(monkeypatch):
    # onnxruntime warns about a provider it cannot use and runs without it; so does offload
    monkeypatch.setattr(
        registry, "availability", lambda name: Availability(name != "opencl", "no device (test)")
    )
    model = fixtures.path("cnn_classifier")
    with pytest.warns(RuntimeWarning, match=r"provider 'opencl' cannot run on this machine \(no device"):
        session = offload.InferenceSession(model, providers=["OpenCLExecutionProvider"])
    assert session.get_providers() == ["cpu"]
    _same_as_onnxruntime(session, model, fixtures.inputs("cnn_classifier", 0, np.random.default_rng(0)))
    with pytest.raises(BackendUnavailableError, match="provider 'opencl' cannot run"):
        offload.InferenceSession(model, offload.SessionOptions(strict=True), providers=["opencl"])


def test_bad_arguments_are_offload_errors(tmp_path):
    model = fixtures.path("cnn_classifier")
    with pytest.raises(BackendUnavailableError, match="no backend named 'tpu'"):
        offload.InferenceSession(model, providers=["TPUExecutionProvider"])
    text = tmp_path / "notes.pte"
    text.write_text("not a model\n")
    with pytest.raises(ModelFormatError, match=r"notes\.pte: not a \.pte file"):
        offload.InferenceSession(str(text))
    session = offload.InferenceSession(model)
    feeds = fixtures.inputs("cnn_classifier", 0, np.random.default_rng(0))
    with pytest.raises(
        OffloadError, match=r"no output named \['nope'\]; the model's outputs are \['logits'\]"
    ):
        session.run(["nope"], feeds)
    with pytest.raises(offload.errors.DTypeError, match="input 'image' has dtype float64"):
        session.run(None, {"image": feeds["image"].astype(np.float64)})
    with pytest.raises(OffloadError, match="provider_options has 2 entries for 1 providers"):
        offload.InferenceSession(model, providers=["cpu"], provider_options=[{}, {}])


def test_providers_after_cpu_get_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing about opencl: it is never asked for
        session = offload.InferenceSession(fixtures.path("gru_model"), providers=["cpu", "opencl"])
    assert session.get_providers() == ["cpu"]


def test_mlpackage_session_matches_core_ml_oracle():
    from tests.frontends.coreml.test_ops import OPS, load_case

    inputs, want, _ = load_case("linear_3d")  # outputs Core ML computed when the case was made
    session = offload.InferenceSession(os.path.join(OPS, "linear_3d.mlpackage"))
    assert [(i.name, i.shape, i.type) for i in session.get_inputs()] == [("x", [2, 3, 4], "tensor(float)")]
    names = [o.name for o in session.get_outputs()]
    assert sorted(names) == sorted(want)
    for name, got in zip(names, session.run(None, inputs)):
        np.testing.assert_allclose(got, want[name], rtol=1e-5, atol=1e-5)


def test_compiled_models_are_cached_by_content_and_providers(tmp_path, monkeypatch):
    from offload import session as session_module
    from offload.session_cache import clear_cache

    cache = tmp_path / "cache"
    model = fixtures.path("gru_model")
    feeds = fixtures.inputs("gru_model", 2, np.random.default_rng(2))
    first = offload.InferenceSession(model, offload.SessionOptions(cache_dir=cache), providers=["example"])
    entries = sorted(p.suffix for p in cache.iterdir())
    assert entries == [".json", ".pte"]

    def no_compile(*args):
        raise AssertionError("compiled again although the cache holds it")

    monkeypatch.setattr(session_module, "_compile", no_compile)
    again = offload.InferenceSession(model, offload.SessionOptions(cache_dir=cache), providers=["example"])
    assert again.get_providers() == first.get_providers() == ["example", "cpu"]
    assert again.get_modelmeta() == first.get_modelmeta()
    _same_as_onnxruntime(again, model, feeds)  # symbolic dim names kept beside the .pte
    with pytest.raises(AssertionError, match="compiled again"):  # other options: another entry
        offload.InferenceSession(
            model, offload.SessionOptions(cache_dir=cache), providers=[("example", {"trace": 1})]
        )
    monkeypatch.undo()
    changed = tmp_path / "m.onnx"
    proto = onnx.load(model)
    proto.doc_string = "the same graph in other bytes"
    onnx.save(proto, changed)
    offload.InferenceSession(str(changed), offload.SessionOptions(cache_dir=cache))
    assert len(list(cache.iterdir())) == 4
    assert clear_cache(cache) == 4 and not list(cache.iterdir())
