"""Load-time fusion of the ai.onnx.ml classifier chain: LinearClassifier → [Normalizer] → ZipMap as one step.

A scikit-learn classifier exported by skl2onnx ends in

    %label, %scores = LinearClassifier(%x, …)
    %probabilities = Normalizer(%scores, norm=…)          (optional)
    %maps = ZipMap(%probabilities, classlabels_…=…)

and its whole run is these three ops on a few rows: the cost is the executor's, per step and per
numpy call, not arithmetic (a 3-row iris model runs in ~0.1 ms, its arithmetic in a few µs).
``fuse_classifier_chains`` makes them one step at the classifier's place (the others' steps
run nothing, ``_FusedAway``) whose run calls the classifier's and the normalizer's prepared
calls (ml_linear_prepared.py) into their arena views and builds the maps from the last one's
rows, as ZipMap's kernel does: the same calls on the same values, so the same bits.

Only where the chain is the classifier's prepared call (``_LinearClassifierCall``), then the
normalizer's (``_NormalizerCall``) if there is one, then ZipMap's kernel step; each link's
result has one reader, the next op, and is no result of the method; no jump lands inside the
chain; ZipMap's labels are as many as the classifier's score columns. Where the fused step
cannot run its calls (an input that is no array, or not of the declared type or shape), the
three kernels run one after the other, as the method's own steps would.
"""

from __future__ import annotations

import numpy as np

from .fusions import _fusion_context
from .kernels.ml_linear_prepared import _LinearClassifierCall, _NormalizerCall
from .steps import (
    MethodState,
    StepInfo,
    _FusedAway,
    _KernelChain,
    _KernelStep,
    _PreparedOutputsStep,
    _PreparedStep,
)

_ZIP_MAP = "ai.onnx.ml::ZipMap"


class _ClassifierChain:
    """The fused chain's step (module docstring): ``classifier``, then ``normalizer`` (None where
    the chain has none), then the maps of ZipMap's ``labels`` into ``out_slot``."""

    __slots__ = ("classifier", "in_slot", "kernel", "labels", "normalizer", "out_slot")

    def run(self, frame: list) -> None:
        x = frame[self.in_slot]
        if type(x) is not np.ndarray:
            return self.kernel.run(frame)
        classifier, normalizer, planned = self.classifier, self.normalizer, frame.planned
        label_slot, scores_slot = classifier.out_slots
        try:
            label, scores = classifier.call(
                [planned[label_slot] if classifier.wanted[0] else None, planned[scores_slot]], x
            )
            if normalizer is not None:
                out = planned[normalizer.out_slot]
                normalizer.call(out, scores)
                scores = out
        except Exception:  # another type or shape than declared: the kernels say what is wrong
            return self.kernel.run(frame)
        if label is not None:
            frame[label_slot] = label
        labels = self.labels
        frame[self.out_slot] = [dict(zip(labels, row)) for row in scores.tolist()]  # float32 to float: exact
        return None

    def info(self) -> StepInfo:
        return self.kernel.info()


def _zip_labels(attrs: dict) -> list | None:
    """ZipMap's class labels as its kernel makes them (Python ints or strings); None where the
    attributes are not one list (the kernel refuses them)."""
    strings, ints = attrs.get("classlabels_strings"), attrs.get("classlabels_int64s")
    if bool(strings) == bool(ints):
        return None
    return [str(s) for s in strings] if strings else [int(i) for i in ints]


def fuse_classifier_chains(m: MethodState, steps: list) -> None:
    """Make each LinearClassifier → [Normalizer] → ZipMap chain of ``steps`` (the method's,
    changed in place) one ``_ClassifierChain`` step (module docstring)."""
    readers, results, targets = _fusion_context(m, steps)
    for pc, first in enumerate(steps):
        if type(first) is not _PreparedOutputsStep or type(first.call) is not _LinearClassifierCall:
            continue
        chain, mid, q = [first], first.out_slots[1], pc + 1
        if q < len(steps) and type(steps[q]) is _PreparedStep and type(steps[q].call) is _NormalizerCall:
            if steps[q].in_slots != [mid] or readers.get(mid) != 1 or mid in results:
                continue
            chain.append(steps[q])
            mid, q = steps[q].out_slot, q + 1
        if q >= len(steps) or any(p in targets for p in range(pc + 1, q + 1)):
            continue
        last = steps[q]
        if type(last) is not _KernelStep or last.op_name != _ZIP_MAP or last.in_slots != [mid]:
            continue
        labels = _zip_labels(last.attrs)
        if readers.get(mid) != 1 or mid in results or labels is None:
            continue
        if len(labels) != first.call.coef_t.shape[1] or not last.out_slots[0]:
            continue
        if any(m._planned[s.out_slots[1] if s is first else s.out_slot] is None for s in chain):
            continue  # the calls write into arena views
        fused = _ClassifierChain()
        fused.classifier, fused.normalizer = first, chain[1] if len(chain) > 1 else None
        fused.in_slot, fused.out_slot, fused.labels = first.in_slots[0], last.out_slots[0], labels
        fused.kernel = _KernelChain([s.kernel for s in chain] + [last])
        steps[pc] = fused
        for p, step in zip(range(pc + 1, q + 1), [*chain[1:], last]):
            away = steps[p] = _FusedAway()
            away.kernel = step if step is last else step.kernel
