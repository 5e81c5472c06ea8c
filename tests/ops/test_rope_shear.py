"""``rope_shear`` is RoPE followed by the shear, eager and compiled, forward and backward."""

import pytest
import torch

from psattn.ops import RotaryEmbedding, apply_rope, shear
from psattn.ops.rope_shear import rope_shear


def stream(T=21, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, T, D, generator=g, dtype=torch.float64, requires_grad=True)
    cos, sin = (t.double() for t in RotaryEmbedding(D)(torch.arange(T)[None].expand(2, T)))
    return x, cos, sin


def test_eager_rope_shear_is_the_composition_and_gamma_zero_is_rope():
    x, cos, sin = stream()
    torch.testing.assert_close(rope_shear(x, cos, sin, 0.7, fused=False), shear(apply_rope(x, cos, sin), 0.7))
    torch.testing.assert_close(rope_shear(x, cos, sin, 0.0, fused=True), apply_rope(x, cos, sin))
    with pytest.raises(ValueError, match="finite"):
        rope_shear(x, cos, sin, float("nan"))


@pytest.mark.slow  # compiles (about 15 s on two cores)
def test_the_compiled_pass_equals_the_composition_with_starts_prev_and_gradients():
    x, cos, sin = stream(T=37)
    starts = torch.zeros(2, 37, dtype=torch.bool)
    starts[1, 20] = True
    prev = torch.randn(2, 3, 1, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    upstream = torch.randn(2, 3, 37, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    fused = rope_shear(x, cos, sin, 1.3, starts=starts, prev=prev, fused=True)
    plain = shear(apply_rope(x, cos, sin), 1.3, starts=starts, prev=prev)
    torch.testing.assert_close(fused, plain, atol=1e-12, rtol=0)
    (g_fused,), (g_plain,) = torch.autograd.grad(fused, x, upstream), torch.autograd.grad(plain, x, upstream)
    torch.testing.assert_close(g_fused, g_plain, atol=1e-12, rtol=0)
