"""offload's example third-party backend: `example`, a CPU reference that runs offload's own kernels.

It shows what a backend package holds: a compile half (``compiler.py``: the ops it takes,
``preprocess``) and a runtime half (``runtime.py``: ``init``, ``execute``) that never imports
the compile half, joined by one ``Backend`` that the entry point in pyproject.toml names.
Each half is imported only when offload asks for it.
"""

from offload.delegates import Backend


def _compiler():
    from .compiler import ExampleCompiler

    return ExampleCompiler()


def _runtime():
    from .runtime import ExampleRuntime

    return ExampleRuntime()


backend = Backend(
    name="example",
    compiler=_compiler,
    runtime=_runtime,
    description="CPU reference backend (offload's numpy kernels); an example of a plugin",
)
