"""Inputs that are not numpy arrays: DLPack exporters are read through DLPack, an array in device
memory that the CPU reads is copied to the host, and one nothing here can read is refused with
what to do; values compared with onnxruntime on the same data."""

import numpy as np
import onnxruntime as ort
import pytest

import offload
from offload.errors import DTypeError
from tests.delegates.device_arrays_support import Exporter
from tests.delegates.opencl_support import needs_opencl
from tests.models import fixtures

MODEL = fixtures.path("cnn_classifier")


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
        DTypeError,
        match=r"input 'image': numpy cannot read this .*OnDevice \(the data is in device memory\); it is on "
        r"DLPack device \(2, 0\): copy it to the host first \(e\.g\. \.get\(\) or \.cpu\(\)\)",
    ):
        session.run(None, {"image": OnDevice(x)})


@needs_opencl
def test_a_pyopencl_array_read_on_the_cpu_is_copied_to_the_host():
    import pyopencl.array as cla

    from offload.delegates.opencl.device import device_for

    x = fixtures.inputs("cnn_classifier", 0, np.random.default_rng(3))["image"]
    on_device = cla.to_device(device_for(None).queue, x)
    session = offload.InferenceSession(MODEL)  # every op on the CPU
    (got,) = session.run(None, {"image": on_device})
    np.testing.assert_allclose(got, _want(x), rtol=1e-4, atol=1e-5)
    (got,) = session.run(None, {"image": on_device}, output_device="device")
    assert isinstance(got, np.ndarray)  # computed on the CPU: a host array either way
    np.testing.assert_allclose(got, _want(x), rtol=1e-4, atol=1e-5)
    (evaluated,) = offload.evaluate(offload.load(MODEL), {"image": on_device}).values()
    np.testing.assert_allclose(evaluated, _want(x), rtol=1e-4, atol=1e-5)
