"""Inputs that are not numpy arrays: DLPack exporters are read through DLPack, device arrays are
refused with what to do; values compared with onnxruntime on the same data."""

import numpy as np
import onnxruntime as ort
import pytest

import offload
from offload.errors import DTypeError
from tests.delegates.opencl_support import needs_opencl
from tests.models import fixtures

MODEL = fixtures.path("cnn_classifier")


class Exporter:
    """Only the DLPack protocol of an array (what a torch CPU tensor or a JAX array offers)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class OnDevice(Exporter):
    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0

    def __dlpack__(self, **kwargs):
        raise BufferError("the data is in device memory")


def _want(x):
    return ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]


def test_a_dlpack_exporter_is_read_through_dlpack():
    x = fixtures.inputs("cnn_classifier", 1, np.random.default_rng(2))["image"]
    session = offload.InferenceSession(MODEL)
    (got,) = session.run(None, {"image": Exporter(x)})
    np.testing.assert_allclose(got, _want(x), rtol=1e-4, atol=1e-5)
    with pytest.raises(
        DTypeError, match=r"input 'image': numpy cannot read this .*OnDevice \(the data is in device"
    ):
        session.run(None, {"image": OnDevice(x)})


@needs_opencl
def test_a_pyopencl_array_is_refused_with_what_to_do():
    import pyopencl.array as cla

    from offload.delegates.opencl.device import device_for

    x = fixtures.inputs("cnn_classifier", 0, np.random.default_rng(3))["image"]
    on_device = cla.to_device(device_for(None).queue, x)  # on the device offload chose
    session = offload.InferenceSession(MODEL)
    with pytest.raises(DTypeError, match=r"numpy cannot read a pyopencl\.array\.Array; .*\.get\(\)"):
        session.run(None, {"image": on_device})
    (got,) = session.run(None, {"image": on_device.get()})
    np.testing.assert_allclose(got, _want(x), rtol=1e-4, atol=1e-5)
