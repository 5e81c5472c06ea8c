import re

import pytest
import torch

from psattn.ops.rope import RotaryEmbedding, apply_rope, rotary_dim
from psattn.ops.rope_shear import rope_shear


def test_rotation_preserves_norm_and_relative_angle():
    rope = RotaryEmbedding(8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    def rotated(x, pos):
        cos, sin = rope(torch.tensor([[pos]]))
        return apply_rope(x, cos, sin)
    assert torch.allclose(rotated(q, 5).norm(), q.norm(), atol=1e-5)
    # the score depends on the position difference only
    s1 = (rotated(q, 7) * rotated(k, 3)).sum()
    s2 = (rotated(q, 14) * rotated(k, 10)).sum()
    assert torch.allclose(s1, s2, atol=1e-5)


def test_matches_complex_rotation_by_hand():
    rope = RotaryEmbedding(4, base=100.0)
    x = torch.randn(1, 1, 1, 4)
    cos, sin = rope(torch.tensor([[3]]))
    out = apply_rope(x, cos, sin)[0, 0, 0]
    for i, freq in enumerate([1.0, 100.0 ** -0.5]):
        angle = torch.tensor(3 * freq)
        z = complex(x[0, 0, 0, i], x[0, 0, 0, i + 2]) * complex(torch.cos(angle), torch.sin(angle))
        assert out[i].item() == pytest.approx(z.real, abs=1e-5)
        assert out[i + 2].item() == pytest.approx(z.imag, abs=1e-5)


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_the_rotation_kernel_equals_the_formula_with_every_order_of_gradient(fraction):
    """apply_rope's own backward (the rotation by -angle) against autograd through x cos + rot(x) sin:
    values, first and second derivatives, and forward-mode derivatives."""
    rope = RotaryEmbedding(8, rotary_fraction=fraction)
    cos, sin = (t.double() for t in rope(torch.tensor([[0, 3, 9], [5, 1, 2]])))
    x = torch.randn(2, 3, 3, 8, dtype=torch.float64, requires_grad=True)
    r = rope.rotary_dim
    formula = x[..., :r] * cos + torch.cat([-x[..., r // 2 : r], x[..., : r // 2]], -1) * sin
    assert torch.allclose(apply_rope(x, cos, sin)[..., :r], formula, atol=1e-12)
    assert torch.autograd.gradcheck(lambda y: apply_rope(y, cos, sin), (x,), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(lambda y: apply_rope(y, cos, sin), (x,))


def test_partial_rotary_leaves_the_rest_untouched():
    rope = RotaryEmbedding(8, rotary_fraction=0.5)
    assert rope.rotary_dim == 4
    x = torch.randn(2, 3, 5, 8)
    cos, sin = rope(torch.arange(5).expand(2, 5))
    out = apply_rope(x, cos, sin)
    assert torch.equal(out[..., 4:], x[..., 4:])
    assert not torch.allclose(out[..., :4], x[..., :4])


def test_position_ids_per_row():
    rope = RotaryEmbedding(8)
    x = torch.randn(1, 2, 4, 8).expand(2, 2, 4, 8)
    pos = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])
    out = apply_rope(x, *rope(pos))
    cos, sin = rope(pos[1:])
    assert torch.allclose(out[1:], apply_rope(x[1:], cos, sin))
    assert not torch.allclose(out[0], out[1])


@pytest.mark.parametrize("head_dim,fraction", [(7, 1.0), (8, 0.25 / 2), (6, 0.5)])
def test_odd_rotary_dimension_is_rejected(head_dim, fraction):
    with pytest.raises(ValueError, match="even"):
        rotary_dim(head_dim, fraction)


def test_bad_fraction_and_base():
    with pytest.raises(ValueError, match="rotary_fraction"):
        RotaryEmbedding(8, rotary_fraction=1.5)
    with pytest.raises(ValueError, match="base"):
        RotaryEmbedding(8, base=1.0)



@pytest.mark.parametrize("kwargs,error,match", [  # the type mistakes are TypeErrors (they were ValueErrors)
    (dict(head_dim=8.5), TypeError, "head_dim must be an integer, got 8.5"),  # rounded to 8 and built
    (dict(head_dim=True), TypeError, "head_dim must be an integer, got True"),
    (dict(head_dim="8"), TypeError, "head_dim must be an integer"),  # can't multiply sequence by non-int of type 'float'
    (dict(head_dim=8, rotary_fraction=True), TypeError, "rotary_fraction must be a number"),  # read as 1.0
    (dict(head_dim=8, rotary_fraction="1"), TypeError, "rotary_fraction must be a number"),  # '<' not supported
    (dict(head_dim=8, base=float("inf")), ValueError, "RoPE base must be a finite number > 1"),  # all frequencies but one 0
    (dict(head_dim=8, base="1e4"), TypeError, "RoPE base must be a finite number > 1"),
])
def test_rope_sizes_of_another_type_are_refused_by_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        RotaryEmbedding(**kwargs)


def test_apply_rope_names_an_argument_that_is_no_tensor():
    cos, sin = RotaryEmbedding(8)(torch.arange(3)[None])
    with pytest.raises(TypeError, match="apply_rope's x must be a torch.Tensor, got list"):
        apply_rope(torch.randn(1, 1, 3, 8).tolist(), cos, sin)  # 'list' object has no attribute 'shape'
    with pytest.raises(TypeError, match="apply_rope's cos must be a torch.Tensor, got NoneType"):
        apply_rope(torch.randn(1, 1, 3, 8), None, sin)


def test_apply_rope_refuses_an_integer_stream_as_shear_does():
    """An int64 stream came back as a float one, rotated, where shear and rope_shear refuse it."""
    cos, sin = RotaryEmbedding(8)(torch.arange(3)[None])
    with pytest.raises(TypeError, match="apply_rope needs a floating-point stream, got torch.int64"):
        apply_rope(torch.arange(24).reshape(1, 1, 3, 8), cos, sin)


def test_rope_tables_are_refused_in_an_integer_dtype():
    """dtype=torch.long gave tables of cos and sin rounded to 0 and 1."""
    with pytest.raises(TypeError, match="floating-point dtype, got torch.int64"):
        RotaryEmbedding(8)(torch.arange(3)[None], dtype=torch.long)
    with pytest.raises(TypeError, match="position_ids must be a torch.Tensor"):
        RotaryEmbedding(8)([[0, 1, 2]])


def test_apply_rope_refuses_tables_of_odd_or_unequal_width():
    x = torch.randn(1, 1, 3, 8)
    with pytest.raises(ValueError, match="one even width"):
        apply_rope(x, torch.ones(3, 7), torch.zeros(3, 7))
    with pytest.raises(ValueError, match="one even width"):
        apply_rope(x, torch.ones(3, 6), torch.zeros(3, 4))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_model_cast_to_half_precision_keeps_float32_frequencies(dtype):
    from psattn import AttentionConfig, DecoderLM, ModelConfig
    model = DecoderLM(ModelConfig(vocab_size=32, d_model=64, n_heads=2, attention=AttentionConfig("key_only", 0.5)))
    positions = torch.arange(4096)[None]
    cos, sin = model.blocks[0].attn.rope(positions)
    rope = model.to(dtype).blocks[0].attn.rope
    assert rope.inv_freq.dtype == torch.float32
    cast_cos, cast_sin = rope(positions)
    assert torch.equal(cast_cos, cos) and torch.equal(cast_sin, sin)
    assert model.double().blocks[0].attn.rope.inv_freq.dtype == torch.float64  # wider stays as asked


def test_apply_rope_refuses_tables_for_other_positions_by_shape():
    cos, sin = RotaryEmbedding(8)(torch.arange(6)[None])  # six positions
    with pytest.raises(ValueError, match=r"RoPE tables of shape \(1, 1, 6, 8\).*stream of shape \(1, 2, 5, 8\)"):
        apply_rope(torch.randn(1, 2, 5, 8), cos, sin)
    one = RotaryEmbedding(8)(torch.tensor([[7]]))  # one position's tables broadcast over five positions
    with pytest.raises(ValueError, match="need its positions"):
        apply_rope(torch.randn(2, 3, 5, 8), *one)
    batch = RotaryEmbedding(8)(torch.arange(5).expand(4, 5))  # a batch of 4 tables for a stream of batch 1
    with pytest.raises(ValueError, match="and its batch"):
        apply_rope(torch.randn(1, 3, 5, 8), *batch)
    assert apply_rope(torch.randn(4, 3, 5, 8), *RotaryEmbedding(8)(torch.arange(5)[None])).shape == (4, 3, 5, 8)


@pytest.mark.parametrize("shape", [(2, 5, 8), (5, 8), (2, 1, 2, 5, 8)])
def test_apply_rope_names_the_stream_shape_it_takes(shape):
    """A (B, T, D) stream was told that RoPE tables (B, 1, T, r) "do not fit" it; streams of other ranks, which
    tables of their rank rotated, are refused as shear and rope_shear refuse them."""
    cos, sin = RotaryEmbedding(8)(torch.arange(5)[None])
    tables = (cos, sin) if len(shape) >= 4 else (cos[0, 0], sin[0, 0])  # (5, 8) fits both by broadcasting
    with pytest.raises(ValueError, match=rf"^apply_rope's x must be a stream \(B, H, T, D\), got shape {re.escape(str(shape))}"):
        apply_rope(torch.randn(shape), *tables)
    with pytest.raises(ValueError, match="split its channels into heads first"):
        apply_rope(torch.randn(2, 5, 8), cos, sin)
    with pytest.raises(ValueError, match=r"streams must be \(B, H, T, D\), got shape \(2, 5, 8\)"):
        rope_shear(torch.randn(2, 5, 8), cos, sin, 0.5)


def test_float64_tables_rotate_orthogonally_and_a_pre_rope_patch_round_trips():
    """float64 tables come from float64 angles: cos² + sin² = 1 and the rotation keeps norms to float64
    precision at long positions (float32 angles miss by about 1e-7), so a pre-RoPE model's identity patch
    on hook_q, which is rotated back by the opposite angle, changes no logit beyond rounding."""
    from psattn import AttentionConfig, DecoderLM, ModelConfig
    from psattn.ops.hooks import patch

    positions = torch.arange(0, 8192, 7)[None]
    cos, sin = RotaryEmbedding(64)(positions, torch.float64)
    assert (cos**2 + sin**2 - 1).abs().max() < 1e-14
    x = torch.randn(1, 2, positions.shape[1], 64, dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x, cos, sin).norm(dim=-1), x.norm(dim=-1), rtol=1e-13, atol=0)
    torch.manual_seed(33)
    config = ModelConfig(vocab_size=11, d_model=8, n_heads=2, attention=AttentionConfig("symmetric", 2.0, "pre_rope"))
    model = DecoderLM(config).double().eval()
    ids = torch.randint(11, (1, 64))
    with torch.no_grad():
        plain = model(ids)
        with patch(model, {"*.hook_q": lambda q: q.clone()}):
            assert (model(ids) - plain).abs().max() < 1e-12


def test_a_rotation_without_gradients_is_the_same_rotation_and_keeps_forward_mode_tangents():
    """Where no gradient flows (a decode step), the rotation skips autograd.Function's bookkeeping."""
    import torch.autograd.forward_ad as fwAD

    x, tangent = torch.randn(2, 3, 5, 8, dtype=torch.float64), torch.randn(2, 3, 5, 8, dtype=torch.float64)
    cos, sin = RotaryEmbedding(8)(torch.arange(5)[None], torch.float64)
    half = lambda y: torch.cat([-y[..., 4:], y[..., :4]], dim=-1)  # noqa: E731
    with torch.no_grad():
        torch.testing.assert_close(apply_rope(x, cos, sin), x * cos + half(x) * sin, rtol=0, atol=1e-15)
        with fwAD.dual_level():
            out = apply_rope(fwAD.make_dual(x, tangent), cos, sin)
            torch.testing.assert_close(fwAD.unpack_dual(out).tangent, tangent * cos + half(tangent) * sin, rtol=0, atol=1e-15)
