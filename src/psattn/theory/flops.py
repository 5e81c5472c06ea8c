"""Count the arithmetic a piece of PyTorch code performs, by intercepting the ATen operators it runs.

Used by the FLOPs certificate: the extra cost of PSA is the difference between the counts of a PSA
model and of the same model with gamma = 0. Elementwise arithmetic counts one FLOP per output
element per operation (``lerp(a, b, w) = a + w (b - a)`` counts three, ``addcmul`` two);
matrix products count 2 M N K. Data movement (cat, where, views, copies) counts zero. The counts
are exact for the code that runs, which is the point: they measure the implementation, not a model
of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

#: FLOPs per output element of elementwise operators (by overload packet).
ELEMENTWISE_COST = {
    aten.add: 1, aten.sub: 1, aten.rsub: 1, aten.mul: 1, aten.div: 1, aten.neg: 1,
    aten.lerp: 3, aten.addcmul: 2, aten.addcdiv: 2,
    aten.exp: 1, aten.log: 1, aten.sqrt: 1, aten.rsqrt: 1, aten.pow: 1, aten.tanh: 1,
    aten.sin: 1, aten.cos: 1, aten.gelu: 1, aten.sigmoid: 1,
}


def _numel(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel()
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], torch.Tensor):
        return x[0].numel()
    return 0


def _matmul_flops(packet, args) -> int | None:
    if packet in (aten.mm, aten.bmm):
        a, b = args[0], args[1]
        return 2 * a.numel() * b.shape[-1]
    if packet == aten.addmm:
        a, b = args[1], args[2]
        return 2 * a.numel() * b.shape[-1] + a.shape[0] * b.shape[-1]
    return None


class FlopCounter(TorchDispatchMode):
    """``with FlopCounter() as fc: ...`` then ``fc.total`` and ``fc.by_op`` (name -> FLOPs)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_op: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.by_op.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        packet = func.overloadpacket
        flops = _matmul_flops(packet, args)
        if flops is None and packet in ELEMENTWISE_COST:
            flops = ELEMENTWISE_COST[packet] * _numel(out)
        if flops:
            self.by_op[packet.__name__] += flops
        return out


def count_flops(fn: Callable[[], Any]) -> tuple[int, dict[str, int]]:
    """(total FLOPs, per-operator FLOPs) of running ``fn()``."""
    with FlopCounter() as counter:
        fn()
    return counter.total, dict(counter.by_op)
