"""optimize_activation::fuse_leaky_relu — ``max(α·x, x)`` with 0 ≤ α ≤ 1 is ``LeakyRelu(x, α)``.

Rule: ``Max(Mul(x, α), x)`` (either order in both ops), α a float constant with one value,
0 ≤ α ≤ 1, the product read by the Max alone and the result of x's type, becomes
``LeakyRelu(x, alpha=α)``. For x ≥ 0, α·x ≤ x; for x < 0, α·x ≥ x: the maximum is what
LeakyRelu picks, and α·x is the same product, so the result is bit for bit the same. With
α > 1 the maximum picks the other branch (that would be ``Min``): no fusion.

Before::

    %m: (2,8,fp32) = Mul(A=%x, B=%alpha)          # %alpha = 0.2
    %y: (2,8,fp32) = Max(data_0=%m, data_0=%x)

After::

    %y: (2,8,fp32) = LeakyRelu(X=%x, alpha=0.2)
"""

from __future__ import annotations

from offload.ir import Program

from ..pattern import Rewriter, is_float, other_input, same_type, with_scalar
from ..registry import graph_pass


@graph_pass("optimize_activation::fuse_leaky_relu")
def fuse_leaky_relu(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, mul in rw.ops():
        m = with_scalar(mul, "Mul")
        if m is None or not rw.alive(mul) or not is_float(mul.outputs[0]):
            continue
        x, alpha = m
        prod = mul.outputs[0]
        mx = rw.only_user(prod)
        if mx is None or mx.op_type != "Max" or mx.domain or len(mx.inputs) != 2:
            continue
        if other_input(mx, prod) is not x or not 0.0 <= alpha <= 1.0 or not same_type(x, mx.outputs[0]):
            continue
        leaky = rw.build(block, "LeakyRelu", [x], {"alpha": alpha}, before=mx, stem="leaky_relu")
        if rw.replace_op(mx, leaky):
            rw.drop(mul, mx)
            changed = True
    return changed
