"""The `opencl` backend's data-movement and indexing kernels on PoCL against onnxruntime:
Slice, Split, Expand, Tile, DepthToSpace, SpaceToDepth, Gather, GatherElements, Pad, Resize."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload
from offload import runtime

from .opencl_support import check, model, needs_opencl, reference, run_on_opencl

pytestmark = needs_opencl
# Data movement is exact; Resize linear is float arithmetic.
EXACT = {"rtol": 0, "atol": 0, "whole": True}
RNG = np.random.default_rng(7)
DTYPES = [np.float32, np.int32, np.int64, np.bool_]


def _data(shape, dtype=np.float32):
    if dtype == np.bool_:
        return RNG.integers(0, 2, shape).astype(np.bool_)
    if dtype == np.float32:
        return RNG.standard_normal(shape).astype(np.float32)
    return RNG.integers(-1000, 1000, shape).astype(dtype)


def _one(op, x, inits=(), extra_inputs=(), outputs=("y",), **attrs):
    """A one-node model over graph input x (its dtype), constant ``inits`` (name, array; the name
    "" marks an absent optional input) and further graph inputs ``extra_inputs``."""
    names = ["x", *(n for n, _ in inits), *(n for n, _ in extra_inputs)]
    node = helper.make_node(op, names, list(outputs), **attrs)
    inputs = [("x", list(x.shape), x.dtype), *[(n, list(a.shape), a.dtype) for n, a in extra_inputs]]
    return model([node], inputs, [(o, x.dtype) for o in outputs], [(n, a) for n, a in inits if n])


def _i64(*v):
    return np.array(v, np.int64)


def _lowered_ops(p):
    return [op.op_type for op in offload.to_backend(p, "opencl", passes="none").main.body.operations]


# -- Slice --


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,starts,ends,axes,steps",
    [
        ((4, 5, 6), (1, 0), (3, 5), (0, 2), None),
        ((4, 5, 6), (-3, 10), (-1, -100), (-1, 1), (1, -2)),  # negative / out-of-range, step < 0
        ((4, 5, 6), (100,), (-100,), (0,), (-1,)),  # the whole axis reversed
        ((4, 5, 6), (2, 1, 0), (1, 4, 6), None, (1, 2, 3)),  # empty along axis 0
        ((7,), (-2,), (-9,), (-1,), (-3,)),
        ((2, 3, 1, 4, 2, 3), (1, -1), (2, 0), (3, -1), (1, -1)),  # rank 6
    ],
)
def test_slice(dtype, shape, starts, ends, axes, steps, tmp_path):
    inits = [("starts", _i64(*starts)), ("ends", _i64(*ends))]
    if axes is not None or steps is not None:
        inits.append(("axes", _i64(*axes)) if axes is not None else ("", None))
    if steps is not None:
        inits.append(("steps", _i64(*steps)))
    x = _data(shape, dtype)
    check(_one("Slice", x, inits), {"x": x}, tmp_path, **EXACT)


def test_slice_int32_bounds(tmp_path):
    x = _data((6, 8))
    inits = [("s", np.array([5, -2], np.int32)), ("e", np.array([0, 2**31 - 1], np.int32))]
    inits += [("a", np.array([0, 1], np.int32)), ("k", np.array([-2, 1], np.int32))]
    check(_one("Slice", x, inits), {"x": x}, tmp_path, **EXACT)


def test_slice_with_starts_and_ends_given_as_inputs_reads_them_on_the_host(tmp_path):
    x = _data((4, 5))
    p = _one("Slice", x, [], extra_inputs=[("s", _i64(1)), ("e", _i64(3))])
    for s, e in [(1, 3), (0, -1), (1, 3)]:
        check(p, {"x": x, "s": _i64(s), "e": _i64(e)}, tmp_path, **EXACT)


# -- Split --


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,axis,split,n",
    [
        ((6, 4), 0, (1, 3, 2), 3),
        ((3, 7, 2), -2, None, 3),  # num_outputs, uneven: 3, 3, 1
        ((2, 4), 1, (0, 4), 2),  # an empty part
        ((2, 3, 2), -1, None, 2),
    ],
)
def test_split(dtype, shape, axis, split, n, tmp_path):
    x = _data(shape, dtype)
    outs = [f"y{i}" for i in range(n)]
    if split is None:
        p = _one("Split", x, outputs=outs, axis=axis, num_outputs=n)
    else:
        p = _one("Split", x, [("split", _i64(*split))], outputs=outs, axis=axis)
    check(p, {"x": x}, tmp_path, **EXACT)


# -- Expand, Tile --


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,to",
    [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 1, 3), (1, 4, 1)), ((4, 1), (4, 0)), ((), (2, 2))],
)
def test_expand(dtype, shape, to, tmp_path):
    x = _data(shape, dtype)
    check(_one("Expand", x, [("shape", _i64(*to))]), {"x": x}, tmp_path, **EXACT)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,repeats", [((2, 3), (2, 3)), ((3, 1, 2), (1, 4, 2)), ((5,), (1,)), ((2, 2), (0, 3))]
)
def test_tile(dtype, shape, repeats, tmp_path):
    x = _data(shape, dtype)
    check(_one("Tile", x, [("repeats", _i64(*repeats))]), {"x": x}, tmp_path, **EXACT)


# -- DepthToSpace, SpaceToDepth --


def _check_as_float(op, x, tmp_path, **attrs):
    """``op`` on x (any dtype) against onnxruntime's float32 kernel on the same values (it has
    no int / bool kernels for these ops; data movement does not care)."""
    if x.dtype == np.float32:
        return check(_one(op, x, **attrs), {"x": x}, tmp_path, **EXACT)
    want = reference(_one(op, x.astype(np.float32), **attrs), {"x": x.astype(np.float32)})["y"]
    _, got = run_on_opencl(_one(op, x, **attrs), {"x": x}, tmp_path, partitions=1)
    assert got["y"].dtype == x.dtype
    np.testing.assert_array_equal(got["y"], want.astype(x.dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["DCR", "CRD", None])  # None: the default, DCR
@pytest.mark.parametrize("shape,k", [((1, 8, 2, 3), 2), ((2, 9, 2, 1), 3), ((1, 3, 2, 2), 1)])
def test_depth_to_space(dtype, mode, shape, k, tmp_path):
    attrs = {"blocksize": k} | ({"mode": mode} if mode else {})
    _check_as_float("DepthToSpace", _data(shape, dtype), tmp_path, **attrs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,k", [((1, 2, 4, 6), 2), ((2, 3, 3, 6), 3)])
def test_space_to_depth(dtype, shape, k, tmp_path):
    _check_as_float("SpaceToDepth", _data(shape, dtype), tmp_path, blocksize=k)


@pytest.mark.parametrize("dtype", DTYPES)
def test_space_to_depth_crd(dtype, tmp_path):
    # mode (opset 28) is newer than onnxruntime: the reference is the spec's reshape-transpose.
    x = _data((2, 3, 4, 6), dtype)
    _, got = run_on_opencl(_one("SpaceToDepth", x, blocksize=2, mode="CRD"), {"x": x}, tmp_path, partitions=1)
    want = x.reshape(2, 3, 2, 2, 3, 2).transpose(0, 1, 3, 5, 2, 4).reshape(2, 12, 2, 3)
    np.testing.assert_array_equal(got["y"], want)


# -- Gather, GatherElements --


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize(
    "shape,axis,indices",
    [
        ((5, 4), 0, [[0, -1], [4, 2]]),
        ((3, 5, 2), 1, [-5, 4, 0, 0]),
        ((3, 5, 2), -1, 1),  # scalar indices drop the axis
        ((4, 3), -2, []),  # no indices: an empty output
    ],
)
@pytest.mark.parametrize("computed", [False, True])
def test_gather(dtype, itype, shape, axis, indices, computed, tmp_path):
    x = _data(shape, dtype)
    idx = np.array(indices, itype)
    if computed:  # the indices are a graph input, read on the device at run time
        p = _one("Gather", x, extra_inputs=[("i", idx)], axis=axis)
        check(p, {"x": x, "i": idx}, tmp_path, **EXACT)
    else:
        check(_one("Gather", x, [("i", idx)], axis=axis), {"x": x}, tmp_path, **EXACT)


def test_gather_out_of_range_writes_zero(tmp_path):
    # onnxruntime rejects such indices; the device reads nothing outside the data and writes 0.
    x = _data((4, 3))
    idx = np.array([1, 4, -5, 2**40, -2], np.int64)
    p = _one("Gather", x, extra_inputs=[("i", idx)], axis=0)
    _, got = run_on_opencl(p, {"x": x, "i": idx}, tmp_path, partitions=1)
    ok = (idx >= -4) & (idx < 4)
    want = np.where(ok[:, None], x[np.where(ok, idx, 0)], 0)
    np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize(
    "shape,ishape,axis",
    [
        ((3, 4), (3, 4), 0),
        ((3, 4), (2, 6), 1),
        ((2, 3, 4), (2, 2, 4), -2),
        ((5,), (3,), 0),
        ((3, 4), (0, 4), 0),
    ],
)
def test_gather_elements(dtype, itype, shape, ishape, axis, tmp_path):
    x = _data(shape, dtype)
    dim = shape[axis]
    idx = RNG.integers(-dim, dim, ishape).astype(itype)
    p = _one("GatherElements", x, extra_inputs=[("i", idx)], axis=axis)
    check(p, {"x": x, "i": idx}, tmp_path, **EXACT)


# -- Pad --


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize(
    "shape,pads,axes",
    [
        ((3, 4), (1, 2, 2, 1), None),
        ((2, 3, 5), (0, 2, 0, 0, 2, 1), None),
        ((2, 3, 5), (2, 1, 2, 2), (-1, 1)),  # axes input, a negative axis
        ((4, 5), (-1, 0, 0, -2), None),  # negative pads crop
    ],
)
def test_pad(dtype, mode, shape, pads, axes, tmp_path):
    x = _data(shape, dtype)
    inits = [("pads", _i64(*pads))]
    if mode == "constant" and dtype != np.bool_:
        inits.append(("value", np.array(7, dtype)))
    elif axes is not None:
        inits.append(("", None))
    if axes is not None:
        inits.append(("axes", _i64(*axes)))
    check(_one("Pad", x, inits, mode=mode), {"x": x}, tmp_path, **EXACT)


def test_pad_bool_constant_value(tmp_path):
    x = _data((3, 2), np.bool_)
    inits = [("pads", _i64(1, 0, 2, 1)), ("value", np.array(True))]
    check(_one("Pad", x, inits), {"x": x}, tmp_path, **EXACT)


def test_pad_reflect_beyond_the_edge_stays_on_cpu():
    x = np.zeros((2, 3), np.float32)
    assert "Delegate" not in _lowered_ops(_one("Pad", x, [("pads", _i64(0, 3, 0, 0))], mode="reflect"))


def test_pad_with_pads_given_as_an_input_reads_them_on_the_host(tmp_path):
    x = _data((2, 3))
    p = _one("Pad", x, extra_inputs=[("pads", _i64(1, 1, 1, 1))])
    for pads in [(1, 1, 1, 1), (0, 2, 3, 0)]:
        check(p, {"x": x, "pads": _i64(*pads)}, tmp_path, **EXACT)


def test_pad_reflect_with_pads_given_as_an_input_is_checked_when_it_specializes(tmp_path):
    # onnxruntime refuses reflecting past the edge: pads known only at run time are checked on the
    # host when the plan specializes, and a call past the edge runs on the CPU fallback
    x = _data((2, 3))
    p = _one("Pad", x, extra_inputs=[("pads", _i64(1, 1, 1, 1))], mode="reflect")
    for pads in [(1, 1, 1, 1), (0, 2, 1, 0)]:
        check(p, {"x": x, "pads": _i64(*pads)}, tmp_path, **EXACT)
    run_on_opencl(p, {"x": x, "pads": _i64(1, 1, 1, 1)}, tmp_path)
    module = runtime.load(str(tmp_path / "m.pte"))
    with pytest.warns(RuntimeWarning, match="at most size - 1"):
        module.run({"x": x, "pads": _i64(0, 3, 0, 0)})


# -- Resize --

RESIZE = {"rtol": 1e-5, "atol": 1e-5, "whole": True}
COORDS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]


def _resize(x, scales=None, sizes=None, **attrs):
    inits = [("", None), ("scales", np.array(scales, np.float32))] if scales is not None else []
    if sizes is not None:
        inits = [("", None), ("", None), ("sizes", _i64(*sizes))]
    return _one("Resize", x, inits, **attrs)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize(
    "scales,sizes",
    [
        ((1, 1, 2, 3), None),
        ((1, 1, 0.5, 0.6), None),
        ((1, 1, 1.5, 0.8), None),
        (None, (2, 3, 9, 2)),
        (None, (2, 3, 1, 7)),
    ],
)
def test_resize_nearest(coord, nearest, scales, sizes, tmp_path):
    x = _data((2, 3, 4, 5))
    p = _resize(x, scales, sizes, mode="nearest", coordinate_transformation_mode=coord, nearest_mode=nearest)
    check(p, {"x": x}, tmp_path, **EXACT)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize(
    "shape,scales,sizes",
    [
        ((2, 3, 4, 5), (1, 1, 2, 1.6), None),
        ((2, 3, 4, 5), (1, 1, 0.5, 0.8), None),
        ((2, 3, 4, 5), None, (2, 3, 7, 3)),
        ((1, 2, 3, 4), None, (1, 2, 1, 9)),
        ((4, 5), (1.5, 2.4), None),  # 2-D
    ],
)
def test_resize_linear(coord, shape, scales, sizes, tmp_path):
    x = _data(shape)
    p = _resize(x, scales, sizes, mode="linear", coordinate_transformation_mode=coord)
    check(p, {"x": x}, tmp_path, **RESIZE)


@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_fractional_resized_length(coord, mode, tmp_path):
    # input size · scale = 3.75 and 7.5: these modes read the scale alone, so it is claimed.
    x = _data((1, 2, 5, 5))
    p = _resize(x, (1, 1, 0.75, 1.5), mode=mode, coordinate_transformation_mode=coord)
    check(p, {"x": x}, tmp_path, **RESIZE)


@pytest.mark.parametrize("coord", ["align_corners", "pytorch_half_pixel"])
def test_resize_fractional_resized_length_stays_on_cpu(coord):
    # ONNX reads the resized length as 3.75, onnxruntime as 3: not claimed.
    x = np.zeros((1, 1, 5, 5), np.float32)
    p = _resize(x, (1, 1, 0.75, 1), mode="linear", coordinate_transformation_mode=coord)
    assert "Delegate" not in _lowered_ops(p)


def test_resize_axes_attribute(tmp_path):
    x = _data((1, 2, 3, 4))
    p = _one("Resize", x, [("", None), ("", None), ("sizes", _i64(6, 2))], axes=[2, -1], mode="linear")
    check(p, {"x": x}, tmp_path, **RESIZE)


@pytest.mark.parametrize(
    "attrs",
    [{"mode": "cubic"}, {"coordinate_transformation_mode": "tf_crop_and_resize"}, {"antialias": 1}],
)
def test_resize_refusals(attrs):
    x = np.zeros((1, 1, 4, 4), np.float32)
    p = _resize(x, (1, 1, 2, 2), **attrs)
    assert "Delegate" not in _lowered_ops(p)


def test_resize_of_int_data_stays_on_cpu():
    x = np.zeros((1, 1, 2, 2), np.int32)
    assert "Delegate" not in _lowered_ops(_resize(x, (1, 1, 2, 2)))
