"""Mixed precision on PoCL: under precision=fp16 the values whose range does not fit half stay float32.

The reference is onnxruntime in float32. Each case also shows what the kept values prevent:
the same plan with every value half (``mixed=0``) gives inf, NaN or a silently wrong answer.
Tolerances: values stored as half carry ~2^-11 relative rounding per stored layer (see
test_opencl_fp16.py); the bounds below are stated per case from the number of stored layers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
from onnx import helper

import offload
from offload import runtime
from offload.delegates.backend import CompileSpecError
from offload.errors import KernelError

from .opencl_support import model, needs_opencl, overflowing, reference

pytestmark = needs_opencl
RNG = np.random.default_rng(21)
FP16 = {"opencl": {"precision": "fp16"}}
ALL_HALF = {"opencl": {"precision": "fp16", "mixed": "0"}}


def lowered(program, specs=FP16, calibration=None, passes="none"):
    return offload.to_backend(program, "opencl", compile_specs=specs, passes=passes, calibration=calibration)


def plans(low) -> list[dict]:
    """The delegates' plans ("fp32" is absent from a plan that keeps nothing)."""
    found = [
        json.loads(bytes(op.attributes["processed"]))
        for op in low.main.body.walk()
        if op.op_type == "Delegate"
    ]
    for plan in found:
        plan.setdefault("fp32", {})
    return found


def kept(low) -> dict[str, str]:
    """Plan value id → why it stayed float32, over the program's delegates."""
    return {i: why for plan in plans(low) for i, why in plan["fp32"].items()}


def run(low, feeds) -> dict:
    module = runtime.load(offload.save(low))
    assert all(d.runs_on == "backend" for d in module.method("forward").delegates)
    return module.run(feeds)


def test_values_calibrated_past_half_stay_float32_and_the_rest_is_half():
    program = overflowing()
    big = {"x": (RNG.standard_normal((2, 3)) * 100).astype(np.float32)}
    low = lowered(program, calibration=[big])
    (plan,) = plans(low)
    assert plan["precision"] == "fp16"
    why = plan["fp32"]
    assert any("past half's 65504" in w for w in why.values()), why
    got = run(low, big)["y"]
    np.testing.assert_allclose(got, reference(program, big)["y"], rtol=1e-3)  # y itself is half
    assert not np.isfinite(run(lowered(program, ALL_HALF), big)["y"]).all()  # what keeping prevents


def test_small_calibrated_values_are_all_half():
    program = overflowing()
    small = {"x": RNG.standard_normal((2, 3)).astype(np.float32)}
    low = lowered(program, calibration=[small])
    (plan,) = plans(low)
    assert plan["fp32"] == {} and not any(s.get("fp32") for s in plan["ops"])
    # x, x·1000 and y stored as half: three roundings, 3u relative
    np.testing.assert_allclose(run(low, small)["y"], reference(program, small)["y"], rtol=3e-3)


def test_without_ranges_every_value_stays_float32_and_says_why():
    program = overflowing()
    (plan,) = plans(lowered(program))
    floats = [i for i, t in plan["dtypes"].items() if t == "float32"]
    assert sorted(plan["fp32"]) == sorted(floats)
    assert any("range unknown" in w for w in plan["fp32"].values())


def _big_variance_batchnorm():
    """Conv → BatchNormalization whose running variance reaches 5·10⁵ (past half) → Relu. The
    means are far from 0 where the variances are large, so that a variance lost to inf (which
    zeroes (x - mean) / sqrt(var)) changes the answer by O(1)."""
    rng = np.random.default_rng(5)
    c = 4
    inits = [
        ("w", rng.standard_normal((c, 3, 3, 3)).astype(np.float32)),
        ("g", rng.uniform(0.5, 2, c)),
        ("b", np.array([0.5, 1.0, 0.2, 0.3])),
        ("m", np.array([-300.0, -200.0, 0.5, -10.0])),
        ("v", np.array([5e5, 2e5, 1.0, 3e4])),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["y"]),
    ]
    return model(nodes, [("x", [1, 3, 8, 8])], ["y"], inits)


def test_a_batchnorm_variance_past_half_keeps_its_step_float32_from_input_ranges():
    program = _big_variance_batchnorm()
    ranged = offload.calibrate(program, input_ranges={"x": (-1.0, 1.0)})  # bounds proven, no samples
    low = lowered(ranged)
    why = kept(low)
    assert any("bounded by [1, 5e+05]" in w for w in why.values()), why  # the variance weight
    x = {"x": RNG.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)}
    want = reference(program, x)["y"]
    # conv output stored as half (one rounding), BN and Relu in float32: 2u relative
    np.testing.assert_allclose(run(low, x)["y"], want, rtol=2e-3, atol=2e-3)
    silent = run(lowered(program, ALL_HALF), x)["y"]  # variance inf as half: (c - mean) lost
    assert np.isfinite(silent).all() and np.abs(silent - want).max() > 0.1


def _attention(scale: float):
    """softmax(Q·Kᵀ) · V with q, k of magnitude ``scale``: the logits reach scale² · D."""
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    return model(nodes, [("q", [1, 6, 16]), ("k", [1, 6, 16]), ("v", [1, 6, 16])], ["y"])


def test_attention_logits_past_half_stay_float32_and_the_probabilities_are_half():
    program = _attention(200.0)

    def feeds():
        return {
            n: (RNG.standard_normal((1, 6, 16)) * (200 if n != "v" else 1)).astype(np.float32) for n in "qkv"
        }

    samples = [feeds() for _ in range(4)]
    low = lowered(program, calibration=samples)
    why = kept(low)
    (plan,) = plans(low)
    assert any("seen in" in w for w in why.values()), why
    assert not all(s.get("fp32") for s in plan["ops"])  # the softmax output and p·V stay half
    x = feeds()
    want = reference(program, x)["y"]
    np.testing.assert_allclose(run(low, x)["y"], want, rtol=1e-2, atol=1e-2)  # p and y stored as half
    half = run(lowered(program, ALL_HALF), x)["y"]  # logits past 65504: inf, then NaN rows
    assert not (np.isfinite(half).all() and np.allclose(half, want, rtol=1e-2, atol=1e-2))


def test_the_guard_reruns_in_float32_an_input_past_the_calibrated_range():
    program = overflowing()
    small = [{"x": RNG.standard_normal((2, 3)).astype(np.float32)} for _ in range(3)]
    specs = {"opencl": {"precision": "fp16", "fp16_check": "1"}}
    low = lowered(program, specs, calibration=small)
    assert plans(low)[0]["fp32"] == {}  # calibrated small: all half
    module = runtime.load(offload.save(low))
    big = {"x": np.full((2, 3), 100, np.float32) + RNG.standard_normal((2, 3)).astype(np.float32)}
    with pytest.warns(RuntimeWarning, match="fp16_check=1"):
        got = module.run(big)["y"]
    fp32 = runtime.load(offload.save(offload.to_backend(program, "opencl", passes="none"))).run(big)["y"]
    np.testing.assert_array_equal(got, fp32)  # the float32 plan's answer, bit for bit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # x, x·1000 and y stored as half: three roundings, 3u relative
        np.testing.assert_allclose(module.run(small[0])["y"], reference(program, small[0])["y"], rtol=3e-3)


def test_under_strict_the_guard_raises_instead_of_rerunning():
    program = overflowing()
    small = [{"x": RNG.standard_normal((2, 3)).astype(np.float32)}]
    low = lowered(program, {"opencl": {"precision": "fp16", "fp16_check": "1"}}, calibration=small)
    module = runtime.load(offload.save(low), strict=True)
    with pytest.raises(KernelError, match="a strict run does not rerun it in float32"):
        module.run({"x": np.full((2, 3), 100, np.float32)})


def test_mixed_takes_0_or_1():
    with pytest.raises(CompileSpecError, match="mixed='yes'"):
        lowered(overflowing(), {"opencl": {"precision": "fp16", "mixed": "yes"}})


def _light(name: str):
    from tests.conformance.cases import light_cases

    (case,) = [c for c in light_cases() if c.name == name]
    ((feeds, _),) = case.data_sets
    return case.model, feeds


# light model → whether its activations pass half's range (with its published constant weights)
LIGHT = {
    "light_resnet50": True,
    "light_squeezenet": True,
    "light_inception_v1": True,
    "light_shufflenet": False,
}


@pytest.mark.parametrize("name", list(LIGHT))
def test_light_models_with_their_published_weights_stay_finite(name):
    # Their weights are constants (0.02 …): activations of most reach 10^9 and more in float32,
    # past half. Calibrated on the input, those values stay float32 and the output equals
    # onnxruntime's in float32 (the softmax outputs, stored as half: 1e-2 relative).
    import onnxruntime as ort

    data, feeds = _light(name)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    low = offload.to_backend(offload.load(data), "opencl", compile_specs=FP16, calibration=[feeds])
    why = kept(low)
    assert any("past half" in w for w in why.values()) == LIGHT[name], why
    (got,) = runtime.load(offload.save(low)).run(feeds).values()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-5)


def test_model_fixtures_calibrated_run_in_fp16_within_tolerance():
    # the transformer (attention, layer norms) and the CNN of tests/models, calibrated on two
    # shapes, run at a third: stored halves drift by a few u per layer
    from tests.models import fixtures

    for name in ("transformer_encoder", "cnn_classifier"):
        program = offload.load(fixtures.path(name))
        samples = [fixtures.inputs(name, case, np.random.default_rng(case)) for case in (0, 1)]
        low = offload.to_backend(program, "opencl", compile_specs=FP16, calibration=samples)
        x = fixtures.inputs(name, 2, np.random.default_rng(5))
        import onnxruntime as ort

        session = ort.InferenceSession(fixtures.path(name), providers=["CPUExecutionProvider"])
        want = dict(zip([o.name for o in session.get_outputs()], session.run(None, x)))
        got = runtime.load(offload.save(low)).run(x)
        for k, w in want.items():
            # relative to the output's scale: the CNN's logits reach ~60 and its ~15 stored layers
            # of half leave ~0.5 % of that
            np.testing.assert_allclose(got[k], w, rtol=0, atol=1e-2 * np.abs(w).max(), err_msg=f"{name}:{k}")
        assert sum(len(p["fp32"]) for p in plans(low)) < sum(
            sum(t == "float32" for t in p["dtypes"].values()) for p in plans(low)
        )  # some values are half


def test_inspect_lists_the_values_kept_float32(tmp_path):
    program = overflowing()
    big = {"x": (RNG.standard_normal((2, 3)) * 100).astype(np.float32)}
    path = tmp_path / "m.pte"
    offload.save(lowered(program, calibration=[big]), path)
    out = subprocess.run(
        [sys.executable, "-m", "offload", "inspect", str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert "kept float32" in out and "past half's 65504" in out, out
