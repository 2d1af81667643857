"""Inputs that live in device memory: a caller's ``pyopencl.array.Array`` or a DLPack exporter on a
GPU (CuPy, torch CUDA), checked by the dtype and shape it reports, then handed as it is to the
delegate that reads it on its own device, or copied to the host once.

A method input stays on the device when every instruction that reads it is a delegate call that
takes device tensors and one of those delegates' backends adopts the array (``BackendRuntime.adopt``:
the same OpenCL context, the same CUDA device); the backend then copies it buffer to buffer into
its own input buffer. Any other input is copied to the host here, once per run (a profile event
"copy to host" with the input's name), and read there by everything after.
"""

from __future__ import annotations

import sys

import numpy as np

from offload.delegates.backend import DeviceTensor
from offload.errors import DTypeError
from offload.profile import Profile, now

# DLPack device types numpy reads in place (kDLCPU, kDLCUDAHost); kDLCUDA is the one CuPy reads.
DLPACK_HOST = (1, 3)
DLPACK_CUDA = 2


class DeviceInput(DeviceTensor):
    """A caller's array in device memory (``array``), as the runtime holds it until a delegate
    adopts it or it is copied to the host: ``where`` says which device, for messages."""

    def __init__(self, name: str, array, shape: tuple[int, ...], dtype: np.dtype, where: str):
        self.name, self.array, self.shape, self.dtype, self.where = name, array, shape, dtype, where

    def to_host(self) -> np.ndarray:
        return host_copy(self.name, self.array, self.where)


def _kind(value) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _is_pyopencl_array(value) -> bool:
    cl_array = sys.modules.get("pyopencl.array")  # loaded wherever such an array exists
    return cl_array is not None and isinstance(value, cl_array.Array)


def _numpy_dtype(dtype) -> np.dtype | None:
    """A device array's dtype as numpy's: numpy dtypes as they are, a torch dtype by its name."""
    try:
        return np.dtype(dtype)
    except TypeError:
        pass
    try:
        return np.dtype(str(dtype).rpartition(".")[2])  # torch.float32 → float32
    except TypeError:
        return None


def device_input(name: str, value) -> DeviceInput | np.ndarray | None:
    """``value`` as a DeviceInput when it is an array in device memory whose dtype and shape can be
    read without copying it; a host copy when it is in device memory but does not say them; None
    when it is not in device memory (numpy reads it on the host)."""
    if _is_pyopencl_array(value):
        where = f"OpenCL device {value.context.devices[0].name.strip()}"
        return DeviceInput(name, value, tuple(int(d) for d in value.shape), value.dtype, where)
    if isinstance(value, (np.ndarray, np.generic)) or not hasattr(value, "__dlpack_device__"):
        return None
    try:
        kind, index = (int(x) for x in value.__dlpack_device__())
    except Exception:  # not a DLPack exporter after all: numpy decides
        return None
    if kind in DLPACK_HOST:
        return None
    where = f"DLPack device ({kind}, {index})"
    dtype = _numpy_dtype(getattr(value, "dtype", None))
    try:
        shape = tuple(int(d) for d in value.shape)
    except (AttributeError, TypeError, ValueError):
        shape = None
    if dtype is None or shape is None:
        return host_copy(name, value, where)
    return DeviceInput(name, value, shape, dtype, where)


def host_copy(name: str, array, where: str) -> np.ndarray:
    """A host copy of a caller's device array; DTypeError naming the input when nothing here can
    read it (a CUDA array without CuPy whose exporter does not copy itself to the host)."""
    kind = _kind(array)
    if _is_pyopencl_array(array):
        import pyopencl as cl

        queue = array.queue if array.queue is not None else cl.CommandQueue(array.context)
        try:
            return array.get(queue=queue)
        except Exception as e:  # a view pyopencl cannot read in one copy
            raise DTypeError(
                f"input '{name}': cannot copy this {kind} from {where} to the host ({e}); "
                "hand over a C-contiguous array (e.g. .copy())"
            ) from None
    try:
        return np.from_dlpack(array, device="cpu", copy=True)
    except (BufferError, RuntimeError, TypeError, ValueError, NotImplementedError) as e:
        first = e
    if type(array).__module__.split(".")[0] == "cupy":
        return np.asarray(array.get())
    dlpack_kind = array.__dlpack_device__()[0] if hasattr(array, "__dlpack_device__") else None
    if dlpack_kind == DLPACK_CUDA:
        try:
            import cupy
        except ImportError:
            cupy = None
        if cupy is not None:
            try:
                return cupy.asnumpy(cupy.from_dlpack(array))
            except Exception as e:  # CuPy cannot read it either: said below
                first = e
    raise DTypeError(
        f"input '{name}': numpy cannot read this {kind} ({first}); it is on {where}: copy it to the "
        "host first (e.g. .get() or .cpu()), or install CuPy (offload[cuda]) to read a CUDA array"
    )


def place(value: DeviceInput, readers: list | None, profile: Profile | None) -> DeviceTensor | np.ndarray:
    """A device input as the run holds it: the first of ``readers`` (the delegates reading it, None
    when anything else reads it too) that adopts it takes it as its device tensor; otherwise it is
    copied to the host, once."""
    for delegate in readers or ():
        tensor = delegate.adopt(value.array)
        if tensor is not None:
            return tensor
    started = now() if profile is not None else 0
    host = value.to_host()
    if profile is not None:
        profile.add("copy to host", "copy", started, now(), bytes=host.nbytes, input=value.name)
    return host
