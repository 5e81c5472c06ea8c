"""``rope_shear`` is RoPE followed by the shear, eager and compiled, forward and backward."""

import pytest
import torch

from psattn.ops import RotaryEmbedding, apply_rope, shear
from psattn.ops.rope_shear import rope_shear, rotate_and_shear


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
    rotated, fused = rotate_and_shear(x, cos, sin, 1.3, starts=starts, prev=prev, fused=True)  # as a cache asks
    plain = shear(apply_rope(x, cos, sin), 1.3, starts=starts, prev=prev)
    torch.testing.assert_close(fused, plain, atol=1e-12, rtol=0)
    torch.testing.assert_close(rotated, apply_rope(x, cos, sin), atol=1e-12, rtol=0)
    (g_fused,), (g_plain,) = torch.autograd.grad(fused, x, upstream), torch.autograd.grad(plain, x, upstream)
    torch.testing.assert_close(g_fused, g_plain, atol=1e-12, rtol=0)


def test_a_bf16_stream_is_rotated_and_sheared_in_fp32_and_rounded_once():
    """Rotating and shearing in bf16 rounds twice, and the shear's gain amplifies the first rounding;
    in fp32 with one rounding the error against fp64 is that of rounding x̂ alone, and smaller."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 512, 64, generator=g).to(torch.bfloat16)
    cos, sin = RotaryEmbedding(64)(torch.arange(512)[None].expand(2, 512))  # float32 tables
    for gamma in (0.0, 0.8, 1.6):
        exact = shear(apply_rope(x.double(), cos.double(), sin.double()), gamma)
        rotated, one_pass = rotate_and_shear(x, cos, sin, gamma)
        twice = shear(apply_rope(x, cos.bfloat16(), sin.bfloat16()), gamma)  # each operation in bf16

        def error(y, exact=exact):
            return ((y.double() - exact).norm() / exact.norm()).item()

        assert one_pass.dtype == torch.bfloat16
        assert error(one_pass) == pytest.approx(error(exact.bfloat16()), rel=0.01)  # x̂ rounded once
        if gamma:
            assert error(one_pass) < 0.65 * error(twice)
            # the rotated stream a cache keeps: the fp32 rows x̂ was computed from, not rounded
            torch.testing.assert_close(rotated, apply_rope(x.float(), cos, sin), atol=0, rtol=0)
        else:
            assert rotated is None  # a stream without a shear keeps no raw rows


def test_the_rotated_stream_is_kept_only_when_asked():
    x, cos, sin = stream()
    rotated, sheared = rotate_and_shear(x, cos, sin, 0.5)
    torch.testing.assert_close(rotated, apply_rope(x, cos, sin))
    torch.testing.assert_close(sheared, rope_shear(x, cos, sin, 0.5))
    assert rotate_and_shear(x, cos, sin, 0.5, keep_rotated=False)[0] is None
    assert rotate_and_shear(x, cos, sin, 0.0)[0] is None
    for gamma in (0.0, 0.5):  # the shear's own checks, with or without a shear
        with pytest.raises(ValueError, match="unknown boundary rule 'wrap'"):
            rotate_and_shear(x, cos, sin, gamma, boundary="wrap")
        with pytest.raises(ValueError, match="starts must be"):
            rotate_and_shear(x, cos, sin, gamma, starts=torch.zeros(2, 3, dtype=torch.bool))
