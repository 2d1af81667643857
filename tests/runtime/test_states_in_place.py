"""A method's states (runtime/module.py, ``_run_with_states``): each run's new states are copied
straight into the arrays that hold them, while the run still holds its arena set, not detached
and copied again. Checked on a TFLite accumulator (a resource variable with a CALL_ONCE initial
value, tests/frontends/tflite/build.py) against float64 numpy: acc_k = exp(2c) + x_0 + … + x_k."""

from __future__ import annotations

import numpy as np

import offload
from tests.frontends.tflite.build import INIT_CONSTANT, computed_init_model


def _module():
    program = offload.load(computed_init_model())
    assert program.main.states == ["acc", "variables_initialized"]
    return offload.runtime.load(offload.save(program))


def test_states_are_kept_in_their_arrays_across_runs():
    module = _module()
    method = module.method("forward")
    (name,) = [p.name for p in method.outputs]
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(5)]
    want = np.exp(2 * np.float64(INIT_CONSTANT)) + np.cumsum(np.array(xs, np.float64), axis=0)
    held = None
    for x, w in zip(xs, want):
        got = module.run({"x": x})[name]
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
        arrays = dict(method._state_values)  # held, so that no id is reused
        if held is not None:
            assert all(arrays[k] is held[k] for k in held)  # the same arrays, written in place
        held = arrays
        np.testing.assert_allclose(method.state()["acc"], w, rtol=1e-5, atol=1e-6)
    # state() gives copies: writing one changes nothing the next run reads
    method.state()["acc"][...] = 1e6
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(module.run({"x": x})[name], want[-1] + 1, rtol=1e-5, atol=1e-6)


def test_a_result_is_not_the_state_array():
    """The results a caller gets are copies: the next run's state update does not change them."""
    module = _module()
    (name,) = [p.name for p in module.method("forward").outputs]
    x = np.full((2, 3), 0.5, np.float32)
    first = module.run({"x": x})[name]
    kept = first.copy()
    module.run({"x": x})
    np.testing.assert_array_equal(first, kept)
    module.reset_state()
    np.testing.assert_array_equal(module.run({"x": x})[name], kept)
