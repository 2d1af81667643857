"""TFLite's STABLEHLO_RNG_BIT_GENERATOR: Philox-4×32-10 or Threefry-2×32-20 (Salmon et al.,
"Parallel random numbers: as easy as 1, 2, 3", SC 2011) written in uint64 ONNX ops, giving
LiteRT's bits.

LiteRT reads the uint64 state as little-endian 32-bit words: words 0 and 1 (state[0]) are the
key; words 2 and 3 (state[1]) the low half of the counter, a 64-bit number that rises by one per
block; Philox's upper counter words are state[2] for a state of three, state[0] again for a
state of two. Blocks (four words for Philox, two for Threefry) fill the output's 32-bit words
in order; a 64-bit output takes two words per element, the first its low half. The new state
is the initial one with state[1] advanced by the number of blocks (its 64-bit addition wraps,
as LiteRT's carry from word 2 into word 3 does).

Every 32-bit quantity is held in a uint64 so that a product of two of them is exact: the high
word of a Philox product is a right shift by 32, and each 32-bit sum is masked to 32 bits.
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value
from offload.schemas.generated.tflite.RngAlgorithm import RngAlgorithm
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from .tflite_node import Node, rule
from .tflite_stablehlo import options_2

MAX_BLOCKS = 1 << 24  # generator blocks a run computes: the output is held as uint64 words

_PHILOX_M = (0xD2511F53, 0xCD9E8D57)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_THREEFRY_PARITY = 0x1BD11BDA
_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_OUTPUT_WORDS = {TflType.UINT32: 1, TflType.INT32: 1, TflType.UINT64: 2, TflType.INT64: 2}


class _Words:
    """uint64 arithmetic on 32-bit words, as ops of ``node``."""

    def __init__(self, node: Node):
        self.node = node

    def const(self, value) -> Value:
        return self.node.imp.const(np.asarray(value, np.uint64))

    def op(self, op_type: str, a: Value, b, attrs=None) -> Value:
        b = b if isinstance(b, Value) else self.const(b)
        return self.node.one(op_type, [a, b], attrs)

    def low(self, x: Value) -> Value:
        return self.op("BitwiseAnd", x, 0xFFFFFFFF)

    def high(self, x: Value) -> Value:
        return self.op("BitShift", x, 32, {"direction": "RIGHT"})

    def add(self, a: Value, b) -> Value:
        return self.low(self.op("Add", a, b))

    def xor(self, *xs: Value) -> Value:
        out = xs[0]
        for x in xs[1:]:
            out = self.op("BitwiseXor", out, x)
        return out

    def rotl(self, x: Value, r: int) -> Value:
        left = self.low(self.op("BitShift", x, r, {"direction": "LEFT"}))
        return self.op("BitwiseOr", left, self.op("BitShift", x, 32 - r, {"direction": "RIGHT"}))


def _philox(w: _Words, key: list, ctr: list) -> list:
    k0, k1 = key
    for _ in range(10):
        p0, p1 = w.op("Mul", ctr[0], _PHILOX_M[0]), w.op("Mul", ctr[2], _PHILOX_M[1])
        ctr = [w.xor(w.high(p1), ctr[1], k0), w.low(p1), w.xor(w.high(p0), ctr[3], k1), w.low(p0)]
        k0, k1 = w.add(k0, _PHILOX_W[0]), w.add(k1, _PHILOX_W[1])
    return ctr


def _threefry(w: _Words, key: list, ctr: list) -> list:
    k0, k1 = key
    k2 = w.xor(k0, k1, w.const(_THREEFRY_PARITY))
    x0, x1 = w.add(ctr[0], k0), w.add(ctr[1], k1)
    schedule = ((0, k1, k2), (1, k2, k0), (0, k0, k1), (1, k1, k2), (0, k2, k0))
    for b, (r, ks0, ks1) in enumerate(schedule, start=1):
        for rot in _THREEFRY_ROTATIONS[r]:
            x0 = w.add(x0, x1)
            x1 = w.xor(w.rotl(x1, rot), x0)
        x0, x1 = w.add(x0, ks0), w.add(w.add(x1, ks1), b)
    return [x0, x1]


@rule("STABLEHLO_RNG_BIT_GENERATOR", version=1)
def rng_bit_generator(node: Node) -> list:
    algorithm = int(options_2(node, "StablehloRngBitGeneratorOptions").get("algorithm"))
    philox = algorithm in (RngAlgorithm.DEFAULT, RngAlgorithm.PHILOX)
    if not philox and algorithm != RngAlgorithm.THREEFRY:
        raise node.fail(f"algorithm {algorithm} is none of DEFAULT, PHILOX, THREEFRY")
    state_shape = node.shape(0)
    if node.tensors[0].get("type") != TflType.UINT64 or state_shape not in ((2,), (3,) if philox else (2,)):
        raise node.fail(
            f"its state is {state_shape}, not uint64 [2]{' or [3]' if philox else ''} "
            f"({'Philox' if philox else 'Threefry'})"
        )
    if len(node.outputs) != 2:
        raise node.fail(f"has {len(node.outputs)} outputs, not the state and the bits")
    out_type = node.outputs[1].get("type")
    if out_type not in _OUTPUT_WORDS:
        raise node.unsupported("its output is not int32, uint32, int64 or uint64")
    out_shape = node.shape(1, output=True)
    words = int(np.prod(out_shape, dtype=np.int64)) * _OUTPUT_WORDS[out_type]
    width = 4 if philox else 2
    blocks = -(-words // width)
    if blocks > MAX_BLOCKS:
        raise node.unsupported(f"{blocks} generator blocks (more than {MAX_BLOCKS})")

    w = _Words(node)
    state = node.inputs[0]
    s = [node.one("Gather", [state, node.ints(i)], {"axis": 0}) for i in range(state_shape[0])]
    key = [w.low(s[0]), w.high(s[0])]
    counter = w.op("Add", s[1], np.arange(blocks, dtype=np.uint64))
    ctr = [w.low(counter), w.high(counter)]
    if philox:
        upper = s[2] if len(s) == 3 else s[0]
        ctr += [w.low(upper), w.high(upper)]
        out = _philox(w, key, ctr)
    else:
        out = _threefry(w, key, ctr)
    stacked = node.one("Concat", [node.one("Unsqueeze", [v, node.ints([1])]) for v in out], {"axis": 1})
    flat = node.one(
        "Slice", [node.one("Reshape", [stacked, node.ints([-1])]), node.ints([0]), node.ints([words])]
    )
    if _OUTPUT_WORDS[out_type] == 2:
        pairs = node.one("Reshape", [flat, node.ints([-1, 2])])
        halves = [node.one("Gather", [pairs, node.ints(i)], {"axis": 1}) for i in (0, 1)]
        flat = w.op("BitwiseOr", halves[0], w.op("BitShift", halves[1], 32, {"direction": "LEFT"}))
        dtype = DataType.UINT64 if out_type == TflType.UINT64 else DataType.INT64
    else:
        flat = node.one("Cast", [flat], {"to": int(DataType.UINT32)})
        dtype = DataType.UINT32 if out_type == TflType.UINT32 else DataType.INT32
    if dtype in (DataType.INT32, DataType.INT64):
        flat = node.one("BitCast", [flat], {"to": int(dtype)})
    bits = node.one("Reshape", [flat, node.ints(list(out_shape))])
    advanced = w.op("Add", s[1], blocks)
    new_state = node.one(
        "Concat", [node.one("Unsqueeze", [v, node.ints([0])]) for v in (s[0], advanced, *s[2:])], {"axis": 0}
    )
    return [new_state, bits]
