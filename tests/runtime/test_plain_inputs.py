"""The run's quick acceptance of plain numpy inputs (runtime/inputs.py ``plain_arrays``): it
takes exactly the arrays ``check_inputs`` would return unchanged, and leaves every other input
(another dtype, rank or static dim, an array subclass, a missing or an unknown name) to ``check_inputs``,
whose conversions and errors a run still gets."""

import numpy as np
import pytest

from offload.errors import DTypeError, ShapeError
from offload.ir import DataType, TensorType
from offload.runtime.inputs import check_inputs, plain_array_ports, plain_arrays

DECLARED = [
    ("x", TensorType(DataType.FLOAT, ("batch", 3))),
    ("n", TensorType(DataType.INT64, ())),
]


def test_plain_arrays_are_what_check_inputs_returns():
    ports = plain_array_ports(DECLARED)
    feeds = {"n": np.array(4), "x": np.zeros((5, 3), np.float32)}
    got = plain_arrays(ports, feeds)
    want = check_inputs(DECLARED, feeds)
    assert got is not None and len(got) == len(want)
    assert all(g is w for g, w in zip(got, want))


@pytest.mark.parametrize(
    "feeds, error",
    [
        ({"x": np.zeros((5, 3), np.float64), "n": np.array(4)}, DTypeError),
        ({"x": np.zeros((5, 4), np.float32), "n": np.array(4)}, ShapeError),
        ({"x": np.zeros((5, 3, 1), np.float32), "n": np.array(4)}, ShapeError),
        ({"x": np.zeros((5, 3), np.float32)}, ShapeError),
        ({"x": np.zeros((5, 3), np.float32), "n": np.array(4), "m": np.array(1)}, ShapeError),
        ({"x": np.ma.zeros((1, 3), np.float32), "n": np.array(4)}, None),
    ],
    ids=["dtype", "static-dim", "rank", "missing", "unknown", "array-subclass"],
)
def test_other_inputs_go_to_check_inputs(feeds, error):
    assert plain_arrays(plain_array_ports(DECLARED), feeds) is None
    if error is None:
        (x, _) = check_inputs(DECLARED, feeds)
        assert type(x) is np.ndarray and x.dtype == np.float32 and x.shape == (1, 3)
    else:
        with pytest.raises(error):
            check_inputs(DECLARED, feeds)


def test_an_input_without_a_rank_has_no_plain_ports():
    assert plain_array_ports([("x", TensorType(DataType.FLOAT, None))]) is None
