"""Batch inference on Ray Data: a `.pte` over a dataset, one loaded module per actor.

    import ray, offload.ray
    predictions = offload.ray.batch_inference(ray.data.read_numpy(...), "model.pte", batch_size=32)

Each actor of the pool loads the module once (from the file's bytes, shipped through Ray's object
store, so workers need no shared file system) and runs every batch it is given. Batches are
shaped for the module:

- an input whose first dim is symbolic takes the whole batch; the last, short batch is padded
  (by repeating its last row) to ``batch_size`` so that a GPU delegate meets one input shape and
  keeps one specialization, and the padding rows are dropped from the outputs;
- an input whose first dim is a size ``b`` (often 1) is fed ``b`` rows at a time.

A row is one sample: the module's input names to arrays without the batch axis (Ray stacks rows
into batches along a new first axis). A module with a `cuda` delegate asks Ray for one GPU per
actor.
"""

from __future__ import annotations

import numpy as np

from offload.errors import OffloadError, ShapeError


def _require_ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise OffloadError("offload.ray needs Ray Data: pip install 'offload[ray]'") from None


class BatchRunner:
    """What one Ray actor holds: a loaded module and how to feed it (see the module docstring)."""

    def __init__(self, pte: bytes, method: str | None = None, batch_size: int = 32, pad: bool = True):
        from offload import runtime

        self.module = runtime.load(pte)
        self.method = self.module.method(method or self.module.method_names[0])
        self.batch_size, self.pad = batch_size, pad
        firsts = {p.shape[0] if p.shape else None for p in self.method.inputs}
        if len(firsts) != 1:
            raise ShapeError(f"offload.ray: the inputs' batch dims differ ({sorted(map(str, firsts))})")
        (first,) = firsts
        self.rows_per_call = first if isinstance(first, int) else None  # None: the whole batch

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [p.name for p in self.method.inputs]
        missing = [n for n in names if n not in batch]
        if missing:
            raise OffloadError(
                f"offload.ray: the batch has no column {missing[0]!r} (columns: {sorted(batch)})"
            )
        rows = len(batch[names[0]])
        feeds = {n: np.asarray(batch[n]) for n in names}
        passed = {k: v for k, v in batch.items() if k not in feeds}  # e.g. a row id: kept as is
        if self.rows_per_call is None:
            if self.pad and 0 < rows < self.batch_size:
                feeds = {n: _pad(x, self.batch_size) for n, x in feeds.items()}
            outputs = self.method.run(feeds)
            return {**passed, **{k: np.asarray(v)[:rows] for k, v in outputs.items()}}
        step = self.rows_per_call
        parts: dict[str, list] = {}
        for start in range(0, rows, step):
            chunk = {n: _pad(x[start : start + step], step) for n, x in feeds.items()}
            taken = min(step, rows - start)
            for k, v in self.method.run(chunk).items():
                parts.setdefault(k, []).append(np.asarray(v)[:taken])
        return {**passed, **{k: np.concatenate(v) for k, v in parts.items()}}


def _pad(x: np.ndarray, n: int) -> np.ndarray:
    if len(x) >= n or len(x) == 0:
        return x
    return np.concatenate([x, np.repeat(x[-1:], n - len(x), axis=0)])


def needs_gpu(pte: bytes) -> bool:
    """Whether the module has a delegate for a backend that needs a GPU (`cuda`)."""
    from offload.schemas import pte as pte_format

    program = pte_format.parse(pte).program
    return any(d.id == "cuda" for plan in program.executionPlan or [] for d in plan.delegates or [])


def batch_inference(
    dataset,
    model,
    *,
    batch_size: int = 32,
    concurrency: int = 1,
    method: str | None = None,
    num_gpus: float | None = None,
    pad: bool = True,
):
    """``dataset`` (a ``ray.data.Dataset`` whose columns are the module's input names, and any
    others, which pass through unchanged, e.g. a row id) mapped
    through the `.pte` ``model`` (a path or its bytes) on a pool of ``concurrency`` actors;
    returns the dataset of outputs (one column per output). ``num_gpus`` per actor defaults to
    1 for a module with a `cuda` delegate, else 0."""
    _require_ray()
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    else:
        with open(model, "rb") as f:
            data = f.read()
    if num_gpus is None:
        num_gpus = 1 if needs_gpu(data) else 0
    return dataset.map_batches(
        BatchRunner,
        fn_constructor_kwargs={"pte": data, "method": method, "batch_size": batch_size, "pad": pad},
        batch_size=batch_size,
        concurrency=concurrency,
        num_gpus=num_gpus,
        batch_format="numpy",
    )
