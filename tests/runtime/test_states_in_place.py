"""A method's states (runtime/module.py, ``_run_with_states``): each run's new states are copied
straight into the arrays that hold them, while the run still holds its arena set, not detached
and copied again. Checked on a TFLite accumulator (a resource variable with a CALL_ONCE initial
value, tests/frontends/tflite/build.py) against float64 numpy: acc_k = exp(2c) + x_0 + … + x_k."""

from __future__ import annotations

import numpy as np

import offload
from offload.runtime.module import _state_places
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


def test_a_state_stays_in_its_inputs_place_between_runs():
    """A state whose input has a place of its own (``bound_runs._place_inputs``) is kept there:
    the next run reads it where it lies, with no copy in."""
    module = _module()
    method = module.method("forward")
    (name,) = [p.name for p in method.outputs]
    x = np.full((2, 3), 0.25, np.float32)
    for k in range(3):
        got = module.run({"x": x})[name]
        np.testing.assert_allclose(got, np.exp(2 * np.float64(INIT_CONSTANT)) + 0.25 * (k + 1), rtol=1e-5)
    planned = method._pool[0][0]
    slots = {p.name: method._input_slots[position] for position, p in method._states}
    assert all(method._state_homes[k] == slots[p.name] for k, (_, p) in enumerate(method._states))
    assert all(method._state_values[n] is planned[s] for n, s in slots.items())


def _swap_model() -> bytes:
    """Two variables that trade values each run: a <- b, b <- a + x; y = a + x."""
    from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
    from offload.schemas.generated.tflite.TensorType import TensorType
    from tests.frontends.tflite.build import Graph, Op, T, _call_once, _var_handle, build

    main = Graph(
        [
            T("x", [3]),
            T("ha", [], TensorType.RESOURCE),
            T("hb", [], TensorType.RESOURCE),
            T("ra", [3]),
            T("rb", [3]),
            T("y", [3]),
        ],
        [
            Op(BuiltinOperator.CALL_ONCE, [], [], _call_once(1)),
            Op(BuiltinOperator.VAR_HANDLE, [], [1], _var_handle("a")),
            Op(BuiltinOperator.VAR_HANDLE, [], [2], _var_handle("b")),
            Op(BuiltinOperator.READ_VARIABLE, [1], [3]),
            Op(BuiltinOperator.READ_VARIABLE, [2], [4]),
            Op(BuiltinOperator.ADD, [3, 0], [5]),
            Op(BuiltinOperator.ASSIGN_VARIABLE, [1, 4], []),
            Op(BuiltinOperator.ASSIGN_VARIABLE, [2, 5], []),
        ],
        [0],
        [5],
    )
    init = Graph(
        [
            T("h1", [], TensorType.RESOURCE),
            T("h2", [], TensorType.RESOURCE),
            T("a0", [3], data=np.array([1, 2, 3], "<f4")),
            T("b0", [3], data=np.array([10, 20, 30], "<f4")),
        ],
        [
            Op(BuiltinOperator.VAR_HANDLE, [], [0], _var_handle("a")),
            Op(BuiltinOperator.VAR_HANDLE, [], [1], _var_handle("b")),
            Op(BuiltinOperator.ASSIGN_VARIABLE, [0, 2], []),
            Op(BuiltinOperator.ASSIGN_VARIABLE, [1, 3], []),
        ],
        [],
        [],
    )
    return build([main, init])


def test_states_that_trade_values_stay_right_in_their_places():
    """a <- b, b <- a + x, each kept in its input's place (the importer copies b into a's
    update): against numpy over four runs."""
    module = offload.runtime.load(offload.save(offload.load(_swap_model())))
    method = module.method("forward")
    a, b = np.array([1, 2, 3], np.float32), np.array([10, 20, 30], np.float32)
    rng = np.random.default_rng(5)
    for _ in range(4):
        x = rng.standard_normal(3).astype(np.float32)
        (got,) = module.run({"x": x}).values()
        np.testing.assert_array_equal(got, a + x)
        np.testing.assert_array_equal(method.state()["a"], b)
        a, b = b, a + x
    assert None not in method._state_homes
    # a plan whose update of a is b's input itself keeps no state in the places: copied into a's
    # place first, it would overwrite b's old value before b's update reads it
    n = len(method._states)
    b_input = method._input_slots[next(pos for pos, p in method._states if p.name == "b")]
    updates = method._output_slots[len(method._output_slots) - n :]
    a_at = next(k for k, (_, p) in enumerate(method._states) if p.name == "a")
    saved = list(method._output_slots)
    method._output_slots[len(saved) - n + a_at] = b_input
    try:
        assert _state_places(method) == [None] * n
    finally:
        method._output_slots[:] = saved
        method._state_homes = None
    assert updates == method._output_slots[len(saved) - n :]
