"""The plain recurrent steps: RNN, GRU and LSTM step loops with default activations, buffers kept."""

from __future__ import annotations

import itertools
import threading

import numpy as np

from .recurrent_frame import _Frame, _kept, _Projection

# Buffers and views of plain calls (_Plain), per thread and shape: building them took 13 µs at
# batch 1, and about 100 µs with the caches cold, as after a pause between runs (a run's first
# numpy call alone then takes 40 µs). Only workspaces up to _WORKSPACE_BYTES are kept.
_WORKSPACES: dict[tuple, tuple] = {}
_WORKSPACE_LIMIT = 32
_WORKSPACE_BYTES = 4 << 20


def _workspace(fr: _Frame, W, R, B, key: tuple, make):
    """The plain call's _Plain for this thread and these shapes (``make()`` on a miss)."""
    shapes = (threading.get_ident(), fr.seq, fr.batch, fr.x.shape[2], fr.dtype, *key)
    return _kept(
        _WORKSPACES, _WORKSPACE_LIMIT, W, R, B, shapes, make, lambda ws: ws.nbytes <= _WORKSPACE_BYTES
    )


_HALF = {np.float32: np.array(0.5, np.float32), np.float64: np.array(0.5, np.float64)}


class _Plain:
    """A plain call's buffers and views for one shape (kept per thread by _workspace): the
    projection, the history of hidden states ``hs`` (with ``extra`` columns of ones), and what
    a subclass's step loop (``run``) needs."""

    def __init__(self, fr: _Frame, Wx: np.ndarray, extra: int = 0):
        self.projection = _Projection(fr, Wx)
        DH = fr.dirs * fr.hidden
        self.hs = np.empty((fr.seq + 1, fr.batch, DH + extra), dtype=fr.dtype)
        if extra:
            self.hs[:, :, DH:] = 1
        self.h0 = self.hs[0, :, :DH]
        self.inputs = fr.product_inputs(self.hs)
        self.half = _HALF[fr.dtype]
        self.buffers = [self.projection.xs, self.projection.xw, self.hs]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.buffers)


class _RNNSteps(_Plain):
    """Tanh, no clip: 3 calls per step (product, add, tanh); the block product straight into
    the next state."""

    def __init__(self, fr: _Frame, Wx, R_mm):
        super().__init__(fr, Wx)
        self.R, self.product, self.block = R_mm, fr.product, fr.block
        xw = self.projection.xw
        if fr.block:
            self.xs_k, self.outs, self.results = (
                xw.reshape(fr.seq, fr.batch, fr.dirs * fr.hidden),
                self.hs[1:],
                self.hs[1:],
            )
        else:
            out, result = fr.product_output(1)
            self.xs_k, self.outs, self.results = (
                xw[:, :, 0],
                itertools.repeat(out),
                itertools.repeat(result[:, 0]),
            )
            self.buffers.append(out)
        self.hs_k = self.hs[1:] if fr.block else fr.steps(self.hs)[1:]

    def run(self, fr: _Frame) -> np.ndarray:
        self.projection(fr)
        matmul, add, tanh, R = self.product, np.add, np.tanh, self.R
        for x_k, h_in, out, result, h in zip(self.xs_k, self.inputs, self.outs, self.results, self.hs_k):
            matmul(h_in, R, out)
            add(result, x_k, h)
            tanh(h, h)
        return self.hs


class _GRUSteps(_Plain):
    """Default activations, linear_before_reset 1: z, r and the candidate's h·Rh + Rbh in one
    product (the bias a row of the block product's matrix against the ones after each state;
    ``Rb_n`` added after a stacked one): 11 calls per step (12 stacked). z, r columns halved
    (σ by tanh)."""

    def __init__(self, fr: _Frame, Wx, R_mm, Rb_n):
        super().__init__(fr, Wx, extra=1 if fr.block else 0)
        N, DH = fr.batch, fr.dirs * fr.hidden
        self.R, self.product, self.Rb_n = R_mm, fr.product, None if fr.block else Rb_n
        self.out, product = fr.product_output(3)
        gates4 = fr.gate_buffer(product)
        gates = gates4.reshape(N, 3 * DH)
        self.views = (
            gates[:, : 2 * DH], gates[:, :DH], gates[:, DH : 2 * DH], gates[:, 2 * DH :],
            gates4[:, :2], gates4[:, 2], product[:, :2], product[:, 2],
        )  # fmt: skip
        xw = self.projection.xw
        self.x_zr, self.x_n = xw[:, :, :2], xw[:, :, 2]
        self.h_prev, self.h_next = self.hs[:-1, :, :DH], self.hs[1:, :, :DH]
        self.buffers += [self.out, gates4]

    def run(self, fr: _Frame) -> np.ndarray:
        self.projection(fr)
        zr, z, r, n, zr4, n4, p_zr, p_n = self.views
        matmul, out, R, Rb_n, half = self.product, self.out, self.R, self.Rb_n, self.half
        add, subtract, multiply, tanh = np.add, np.subtract, np.multiply, np.tanh
        for x_zr, x_n, h_in, h_prev, h in zip(self.x_zr, self.x_n, self.inputs, self.h_prev, self.h_next):
            matmul(h_in, R, out)
            add(p_zr, x_zr, zr4)
            if Rb_n is not None:
                add(p_n, Rb_n, n4)
            tanh(zr, zr)
            multiply(zr, half, zr)
            add(zr, half, zr)
            multiply(n, r, n)
            add(n4, x_n, n4)
            tanh(n, n)
            subtract(h_prev, n, h)  # h' = n + z (h - n)
            multiply(h, z, h)
            add(h, n, h)
        return self.hs


class _GRU0Steps(_Plain):
    """Default activations, linear_before_reset 0: the candidate's product takes r ⊙ h, so it
    waits for the z, r product: two products and 12 calls per step."""

    def __init__(self, fr: _Frame, Wx, R_zr, R_n):
        super().__init__(fr, Wx)
        N, DH = fr.batch, fr.dirs * fr.hidden
        self.R_zr, self.R_n, self.product = R_zr, R_n, fr.product
        zr_out, p_zr = fr.product_output(2)
        zr4 = fr.gate_buffer(p_zr)
        zr = zr4.reshape(N, 2 * DH)
        n_out, p_n = fr.product_output(1)
        n4 = fr.gate_buffer(p_n)
        rh = np.empty((N, DH), dtype=fr.dtype)
        self.views = (zr_out, p_zr, zr4, zr, zr[:, :DH], zr[:, DH:], n_out, p_n, n4, n4.reshape(N, DH), rh)
        self.rh_in = fr.product_inputs(rh)
        xw = self.projection.xw
        self.x_zr, self.x_n = xw[:, :, :2], xw[:, :, 2:]
        self.buffers += [zr_out, zr4, n_out, n4, rh]

    def run(self, fr: _Frame) -> np.ndarray:
        self.projection(fr)
        zr_out, p_zr, zr4, zr, z, r, n_out, p_n, n4, n, rh = self.views
        matmul, R_zr, R_n, rh_in, half = self.product, self.R_zr, self.R_n, self.rh_in, self.half
        add, subtract, multiply, tanh = np.add, np.subtract, np.multiply, np.tanh
        hs = self.hs
        for x_zr, x_n, h_in, h_prev, h in zip(self.x_zr, self.x_n, self.inputs, hs, hs[1:]):
            matmul(h_in, R_zr, zr_out)
            add(p_zr, x_zr, zr4)
            tanh(zr, zr)
            multiply(zr, half, zr)
            add(zr, half, zr)
            multiply(r, h_prev, rh)
            matmul(rh_in, R_n, n_out)
            add(p_n, x_n, n4)
            tanh(n, n)
            subtract(h_prev, n, h)  # h' = n + z (h - n)
            multiply(h, z, h)
            add(h, n, h)
        return hs


class _LSTMSteps(_Plain):
    """Default activations, no peepholes, clip or coupled gate: 9 calls per step. Gate order
    o, i, f, c (_PLAIN_ORDER), o, i, f columns halved (σ by tanh); the cell state kept in the
    gate buffer after c (``c``), so that one multiply gives [i·c̃, f·c] (one call fewer than
    two multiplies)."""

    def __init__(self, fr: _Frame, Wx, R_mm):
        super().__init__(fr, Wx)
        N, D, H = fr.batch, fr.dirs, fr.hidden
        DH = D * H
        buf = np.empty((N, 5 * DH), dtype=fr.dtype)
        gates = buf[:, : 4 * DH]
        gates4 = gates.reshape(N, 4, D, H)
        if fr.block:
            out, product = gates, gates4
        else:
            out, product = fr.product_output(4)
            self.buffers.append(out)
        pair = np.empty((N, 2 * DH), dtype=fr.dtype)
        self.c = buf[:, 4 * DH :]
        self.views = (
            out, product, gates4, gates, buf[:, : 3 * DH], buf[:, :DH], buf[:, DH : 3 * DH],
            buf[:, 3 * DH :], self.c, pair, pair[:, :DH], pair[:, DH:],
        )  # fmt: skip
        self.R = R_mm
        # np.dot wants a C-contiguous output: the gates' slice of the buffer is one at batch 1.
        self.product = fr.product if N == 1 else np.matmul
        self.buffers += [buf, pair]

    def run(self, fr: _Frame, cs) -> np.ndarray:
        """Runs the steps from ``hs[0]`` and ``c``; ``cs``, where given, gets every step's cell
        state after its initial one."""
        xw = self.projection(fr)
        out, product, gates4, gates, oif, o, i_f, g_c, c, pair, ig, fc = self.views
        matmul, R, half = self.product, self.R, self.half
        add, multiply, tanh, copyto = np.add, np.multiply, np.tanh, np.copyto
        keeps = cs[1:] if cs is not None else itertools.repeat(None)
        for x_k, h_in, h, keep in zip(xw, self.inputs, self.hs[1:], keeps):
            matmul(h_in, R, out)
            add(product, x_k, gates4)
            tanh(gates, gates)
            multiply(oif, half, oif)
            add(oif, half, oif)
            multiply(i_f, g_c, pair)
            add(ig, fc, c)
            tanh(c, h)
            multiply(h, o, h)
            if keep is not None:
                copyto(keep, c)
        return self.hs


def _steps(op: str, linear_before_reset: int, fr: _Frame, derived: tuple) -> _Plain:
    """A plain call's buffers and step loop for ``fr``'s shapes and the derived weights (_derive)."""
    Wx, _, Rb_n, *products = derived
    if op == "LSTM":
        return _LSTMSteps(fr, Wx, *products)
    if op == "RNN":
        return _RNNSteps(fr, Wx, *products)
    if linear_before_reset:
        return _GRUSteps(fr, Wx, *products, Rb_n)
    return _GRU0Steps(fr, Wx, *products)


def _run_plain(fr: _Frame, steps: _Plain, initial_h) -> tuple:
    """A plain RNN or GRU call: (Y, Y_h), None for an output no one reads."""
    with fr.quiet():
        fr.rows(initial_h, "initial_h", steps.h0)
        hs = steps.run(fr)
    return fr.sequence(hs), fr.final(1, hs)


def _run_lstm(fr: _Frame, steps: _LSTMSteps, initial_h, initial_c) -> tuple:
    """A plain LSTM call: (Y, Y_h, Y_c), None for an output no one reads."""
    with fr.quiet():
        fr.rows(initial_h, "initial_h", steps.h0)
        fr.rows(initial_c, "initial_c", steps.c)
        # The cell states' history only where sequence_lens asks for states before the end.
        cs = fr.history(fr.state(initial_c, "initial_c")) if fr.lens is not None else None
        hs = steps.run(fr, cs)
    return fr.sequence(hs), fr.final(1, hs), fr.final(2, cs, steps.c)
