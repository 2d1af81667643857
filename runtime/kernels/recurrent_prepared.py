"""Prepared calls of plain RNN, GRU and LSTM ops, made once per .pte method load."""

from __future__ import annotations

import copy
import functools
import threading

import numpy as np

from offload.errors import OffloadError

from . import prepared_outputs
from .recurrent_frame import _DEFAULTS, _DIRECTIONS, _TO_LAYOUT_1, _derive, _Frame, _is_default
from .recurrent_steps import _run_lstm, _run_plain, _steps

# ---- prepared calls (runtime/steps.py's _PreparedOutputsStep) ----------------------------------


class _Outputs:
    """The arena views a prepared call writes its outputs into, offered to the frame as a
    kernel's context offers them (None for an output no one reads)."""

    __slots__ = ("views",)

    def __init__(self):
        self.views: list = []

    def output_wanted(self, i: int) -> bool:
        return i < len(self.views) and self.views[i] is not None

    def out(self, i: int):
        return self.views[i] if i < len(self.views) else None


class _Workspace:
    """A prepared call's own frame (X, sequence lengths and output views set per call), step
    buffers and the derived weights they were made for, per thread; for the output views of
    ``key`` (their ids), the copies that write them (``_PreparedCall._outputs``)."""

    __slots__ = ("copies", "derived", "frame", "h0_zero", "key", "outputs", "results", "steps")


class _PreparedCall:
    """A plain RNN, GRU or LSTM call prepared for its inputs' types: the frame (shapes, checks of
    X and the attributes) made once; the derived weights of the last read-only W, R and B it met
    (a .pte's constants, the same arrays at every run: an identity check instead of _kept's
    lookup) and, per thread, the step buffers kept by the call itself (_Workspace). Where every
    sequence runs the whole length, the outputs that steps read are copied from the buffers
    into their arena views by copies made once per set of views, and a zero initial state
    (omitted) is not written again while the last call's was one too (no step writes it); else
    the kernel's way with this frame (``_run_lstm``, ``_run_plain``). Initial states and sequence
    lengths are read at every call, checked as the kernel checks them (a ShapeError here sends
    the method to the kernel, which raises it). The same step loops, and copies of the same
    values, as the kernel's: the same bits. What this spares per call is Python (each piece of
    it some µs after a pause, as the benchmark times runs): the frame, the kept-weights and
    workspace lookups, the method's context and storing of each result, the outputs' checks."""

    def __init__(self, op: str, linear_before_reset: int, frame: _Frame):
        self.op, self.linear_before_reset, self.frame = op, linear_before_reset, frame
        self.shape, self.dtype = frame.X.shape, frame.X.dtype
        self.kept: tuple | None = None  # (W, R, B, derived weights)
        self.local = threading.local()

    # An omitted input (sequence_lens, P: slot 0 of the step) is None here, as the kernel gets it.
    omitted_inputs = True

    def __call__(self, outs, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None):
        if X.shape != self.shape or X.dtype != self.dtype or P is not None:
            raise TypeError(f"{self.op}: X {X.dtype}{list(X.shape)}, P or its type not the prepared ones")
        return self._run(outs, X, W, R, B, sequence_lens, initial_h, initial_c)

    def _run(self, outs, X, W, R, B, sequence_lens, initial_h, initial_c):
        kept = self.kept
        if kept is not None and kept[0] is W and kept[1] is R and kept[2] is B:
            derived = kept[3]
        else:
            derived = self._derive(W, R, B)
        ws = getattr(self.local, "ws", None)
        if ws is None or ws.derived is not derived:
            ws = self._workspace(derived)
        fr, steps = ws.frame, ws.steps
        fr.X = X
        fr.x = X.transpose(1, 0, 2) if fr.layout else X
        if sequence_lens is None:
            fr.lens = None
        else:
            fr.sequence_lengths(sequence_lens)
        if fr.lens is not None or fr.seq == 0:
            ws.outputs.views, ws.h0_zero = outs, False
            if self.op == "LSTM":
                return _run_lstm(fr, steps, initial_h, initial_c)
            return _run_plain(fr, steps, initial_h)
        if initial_h is not None:
            ws.h0_zero = False
            fr.rows(initial_h, "initial_h", steps.h0)
        elif not ws.h0_zero:
            steps.h0[...] = 0
            ws.h0_zero = True
        if self.op == "LSTM":
            if initial_c is None:
                steps.c[...] = 0
            else:
                fr.rows(initial_c, "initial_c", steps.c)
            steps.run(fr, None)
        else:
            steps.run(fr)
        if tuple(map(id, outs)) != ws.key:
            self._outputs(ws, outs)
        for dst, src in ws.copies:
            np.copyto(dst, src)
        return ws.results

    def _outputs(self, ws: _Workspace, outs: list) -> None:
        """The copies that write ``outs`` from the buffers (as _Frame.sequence and final do
        where every sequence runs the whole length), and the results to return."""
        fr, hs = ws.frame, ws.steps.hs
        S, N, D, H = fr.seq, fr.batch, fr.dirs, fr.hidden
        h4 = fr.steps(hs)
        shapes = [(S, D, N, H), (D, N, H), (D, N, H)]
        copies = []
        for i, view in enumerate(outs):
            if view is None:
                continue
            shape = shapes[i]
            if fr.layout:
                perm, back = _TO_LAYOUT_1[len(shape)]
                if view.shape != tuple(shape[p] for p in perm):
                    raise TypeError(f"{self.op}: output {i} of shape {view.shape}")
                out = view.transpose(back)
            else:
                out = view
            if out.shape != shape or view.dtype != fr.dtype or not view.flags.c_contiguous:
                raise TypeError(f"{self.op}: output {i} {view.dtype}{list(view.shape)}")
            if i == 0:
                for d, reverse in enumerate(fr.reverses):
                    copies.append((out[:, d], h4[S:0:-1, :, d] if reverse else h4[1:, :, d]))
            else:
                rows = hs[S] if i == 1 else ws.steps.c
                copies.append((out, rows[:, : D * H].reshape(N, D, H).transpose(1, 0, 2)))
        ws.copies, ws.results, ws.key = copies, tuple(outs), tuple(map(id, outs))

    def _derive(self, W, R, B) -> tuple:
        self.frame.check_weights(W, R, B)
        derived = _derive(self.op, self.frame, W, R, B, True, self.linear_before_reset)
        if not (W.flags.writeable or R.flags.writeable or (B is not None and B.flags.writeable)):
            self.kept = (W, R, B, derived)
        return derived

    def _workspace(self, derived: tuple) -> _Workspace:
        ws = _Workspace()
        ws.derived = derived
        ws.frame = fr = copy.copy(self.frame)
        fr.ctx = ws.outputs = _Outputs()
        ws.steps = _steps(self.op, self.linear_before_reset, fr, derived)
        ws.h0_zero, ws.key = False, None
        self.local.ws = ws
        return ws


class _BindableCall(_PreparedCall):
    """A prepared call of an op without sequence_lens, which a _BoundRun may take: bound to its
    arrays (inputs of the prepared types), it runs the steps straight from them with no check
    that a run's values could fail (a call with sequence lengths checks each run's, and a bad one
    is the kernel's error to raise, so it stays unbound)."""

    def bind(self, outs, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None):
        if X.shape != self.shape or X.dtype != self.dtype or P is not None or sequence_lens is not None:
            raise TypeError(f"{self.op}: X {X.dtype}{list(X.shape)}, P or its type not the prepared ones")
        if self.frame.seq:
            return functools.partial(self._run, outs, X, W, R, B, None, initial_h, initial_c)
        return functools.partial(self._into, outs, X, W, R, B, None, initial_h, initial_c)

    def _into(self, outs, *args) -> None:
        """The call of an empty sequence, its results copied into ``outs`` where they are not
        there already (a bound call leaves them in the arena views it got)."""
        for view, result in zip(outs, self._run(outs, *args)):
            if view is not None and result is not view:
                np.copyto(view, result)


def _plain_attrs(op: str, attrs: dict, dirs: int) -> bool:
    """Whether a call with these attributes takes the plain steps (as the kernels decide)."""
    names = attrs.get("activations")
    if op == "RNN" and dirs == 1 and names == ["Tanh", "Tanh"]:
        names = None
    if names is not None and len(names) != len(_DEFAULTS[op]) * dirs:
        return False
    if op == "LSTM" and attrs.get("input_forget"):
        return False
    return attrs.get("clip") is None and _is_default(op, names)


def _prepare(op: str, attrs: dict, inputs: list, outputs: list) -> _PreparedCall | None:
    """The prepared call of a plain ``op`` whose X is float32 or float64 and whose W, R (and B)
    have the shapes X and the attributes ask for, writing outputs of the types it computes; None
    otherwise (the kernel runs, and raises what it finds)."""
    if (
        len(inputs) < 3
        or any(s is None for s in inputs[:3])
        or (op == "LSTM" and len(inputs) > 7 and inputs[7])
    ):
        return None
    (dtype, x_shape), direction = inputs[0], attrs.get("direction")
    if dtype not in (np.float32, np.float64) or len(x_shape) != 3 or direction not in _DIRECTIONS:
        return None
    if not _plain_attrs(op, attrs, len(_DIRECTIONS[direction])):
        return None
    # Views of one element stand in for the weights: the frame checks their shapes.
    W, R, B = (
        None if s is None else np.broadcast_to(np.zeros((), s[0]), s[1])
        for s in (inputs[1], inputs[2], inputs[3] if len(inputs) > 3 else None)
    )
    X = np.zeros(x_shape, dtype)
    try:
        fr = _Frame(None, op, X, W, R, B, None, attrs.get("hidden_size"), attrs.get("layout", 0), direction)
    except OffloadError:
        return None
    S, N, D, H = fr.seq, fr.batch, fr.dirs, fr.hidden
    shapes = [(S, D, N, H), (D, N, H), (D, N, H)]
    for i, spec in enumerate(outputs):
        if spec is None:
            continue
        shape = shapes[i]
        if fr.layout:
            shape = tuple(shape[p] for p in _TO_LAYOUT_1[len(shape)][0])
        if np.dtype(spec[0]) != dtype or tuple(spec[1]) != shape:
            return None
    lens = inputs[4] if len(inputs) > 4 else None  # None: omitted
    call = _PreparedCall if lens is not None else _BindableCall
    return call(op, int(bool(attrs.get("linear_before_reset"))) if op == "GRU" else 0, fr)


@prepared_outputs("RNN")
def _rnn_prepared(attrs, inputs, outputs):
    return _prepare("RNN", attrs, inputs, outputs)


@prepared_outputs("GRU")
def _gru_prepared(attrs, inputs, outputs):
    return _prepare("GRU", attrs, inputs, outputs)


@prepared_outputs("LSTM")
def _lstm_prepared(attrs, inputs, outputs):
    return _prepare("LSTM", attrs, inputs, outputs)
