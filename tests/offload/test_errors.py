"""The offload.errors hierarchy: what each error also is, and that its docstring lists them all."""

import inspect

import numpy as np
import pytest

import offload
from offload import errors
from offload.delegates.backend import CompileSpecError
from tests.models import fixtures


def test_shape_and_dtype_errors_are_also_value_and_type_errors():
    session = offload.InferenceSession(fixtures.path("gru_model"))
    x = np.zeros((2, 3, 8), np.float32)
    with pytest.raises(ValueError, match=r"input 'x' has shape \(3, 8\), the model declares rank 3") as e:
        session.run(None, {"x": x[0]})
    assert isinstance(e.value, errors.ShapeError)
    with pytest.raises(TypeError, match="input 'x' has dtype int32, the model declares float32") as e:
        session.run(None, {"x": x.astype(np.int32)})
    assert isinstance(e.value, errors.DTypeError)
    with pytest.raises(errors.OffloadError):  # one except clause for everything offload raises
        session.run(None, {})


def test_the_module_docstring_names_every_error():
    doc = errors.__doc__
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]
    assert len(classes) >= 10
    for c in [*classes, CompileSpecError]:
        assert f"``{c.__name__}``" in doc, c.__name__
