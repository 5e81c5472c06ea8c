"""``rope_shear`` is RoPE followed by the shear, eager and compiled, forward and backward."""

import pytest
import torch

from psattn.ops import RotaryEmbedding, apply_rope, shear
from psattn.ops.rope_shear import rope_shear, rotate_and_shear, rotated_and_sheared


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


@pytest.mark.parametrize("gamma", [0.0, 0.7])
def test_an_integer_stream_is_refused_as_shear_refuses_it(gamma):
    x = torch.arange(32).reshape(1, 2, 2, 8)  # gamma = 0 returned its rotation rounded back to integers
    cos, sin = RotaryEmbedding(8)(torch.arange(2)[None])
    with pytest.raises(TypeError, match="needs a floating-point stream, got torch.int64"):
        rope_shear(x, cos, sin, gamma)


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


def test_the_layers_path_without_the_stream_checks_computes_the_same_and_still_refuses_what_does_not_fit():
    """``rotated_and_sheared`` (a layer's own streams and tables, unchecked: a decode step's row costs less than
    the checks) equals ``rotate_and_shear`` on a whole stream and on a decoded row after ``prev``; a ``prev`` row of
    another batch (which a lerp would broadcast), a gamma that is not finite and an unknown rule are refused."""
    x, cos, sin = stream()
    prev = torch.randn(2, 3, 1, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    row, row_cos, row_sin = x[:, :, -1:].detach(), cos[:, :, -1:], sin[:, :, -1:]
    for args, kwargs in (((x, cos, sin), {}), ((row, row_cos, row_sin), {"prev": prev})):
        for gamma in (0.0, 0.8):
            want = rotate_and_shear(*args, gamma, **kwargs)
            got = rotated_and_sheared(*args, gamma, starts=None, prev=kwargs.get("prev"), boundary="replicate",
                                      keep_rotated=True)
            for a, b in zip(got, want, strict=True):
                assert (a is None and b is None) or torch.equal(a, b)
    with pytest.raises(ValueError, match=r"prev must be \(B, H, 1, D\) = \(2, 3, 1, 16\)"):
        rotated_and_sheared(row, row_cos, row_sin, 0.8, starts=None, prev=prev[:1], boundary="replicate", keep_rotated=True)
    with pytest.raises(ValueError, match="finite"):
        rotated_and_sheared(row, row_cos, row_sin, float("nan"), starts=None, prev=prev, boundary="replicate",
                            keep_rotated=True)
    with pytest.raises(ValueError, match="unknown boundary rule 'wrap'"):
        rotated_and_sheared(row, row_cos, row_sin, 0.8, starts=None, prev=prev, boundary="wrap", keep_rotated=True)


@pytest.mark.parametrize("boundary", ["replicate", "zero"])
def test_a_training_stream_takes_one_node_equal_to_the_composition_with_every_order_of_gradient(boundary):
    """Where a gradient flows, RoPE and the shear are one autograd node whose backward is the transposed
    pass: values, first and second derivatives, forward-mode ones and each mode through the other equal
    the two operations', also for a stream that is a transposed view (as projected queries are), for
    tables shared by the batch (1, 1, T, r) and for one row."""
    x, cos, sin = stream(T=9, D=8)
    x_view = x.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()  # (B, H, T, D), strided
    one_row, *one_row_tables = stream(T=1, D=8)
    for y, tables in ((x, (cos, sin)), (x_view, (cos, sin)), (x, (cos[:1], sin[:1])), (one_row, one_row_tables)):
        pass_ = lambda y, tables=tables: rope_shear(y, *tables, 0.7, boundary=boundary, fused=False)  # noqa: E731
        out = pass_(y)
        assert type(out.grad_fn).__name__ == "_RotateShearBackward"  # one node
        torch.testing.assert_close(out, shear(apply_rope(y, *tables), 0.7, boundary=boundary), atol=1e-12, rtol=0)
        assert torch.autograd.gradcheck(pass_, (y,), check_forward_ad=True, fast_mode=True)  # random projections
        assert torch.autograd.gradgradcheck(pass_, (y,), check_fwd_over_rev=True, fast_mode=True)
        two_ops = lambda y, tables=tables: shear(apply_rope(y, *tables), 0.7, boundary=boundary)  # noqa: E731
        tangent = torch.randn_like(y).requires_grad_()
        for g_node, g_ops in zip(*(reverse_over_forward(f, y, tangent) for f in (pass_, two_ops)), strict=True):
            torch.testing.assert_close(g_node, g_ops, atol=1e-12, rtol=0)


def reverse_over_forward(fn, x, tangent):
    """The gradients, with respect to x and the tangent, of a weighted sum of fn's forward-mode tangent."""
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        out_tangent = fwAD.unpack_dual(fn(fwAD.make_dual(x, tangent))).tangent
    weights = torch.randn(out_tangent.shape, generator=torch.Generator().manual_seed(5), dtype=out_tangent.dtype)
    return torch.autograd.grad((out_tangent * weights).sum(), (x, tangent), allow_unused=True, materialize_grads=True)


def test_the_one_node_pass_rounds_bf16_as_the_two_fp32_operations_do():
    """In bf16 the node rotates and shears in fp32 and rounds once, forward and backward, bit for bit as
    the fp32 operations with one rounding at each end."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 33, 16, generator=g).to(torch.bfloat16).requires_grad_()
    upstream = torch.randn(2, 4, 33, 16, generator=g).to(torch.bfloat16)
    cos, sin = RotaryEmbedding(16)(torch.arange(33)[None].expand(2, 33))
    one_node = rope_shear(x, cos, sin, 0.8)
    two_ops = shear(apply_rope(x.float(), cos, sin), 0.8).to(torch.bfloat16)
    assert type(one_node.grad_fn).__name__ == "_RotateShearBackward"
    torch.testing.assert_close(one_node, two_ops, atol=0, rtol=0)
    (g_node,), (g_ops,) = torch.autograd.grad(one_node, x, upstream), torch.autograd.grad(two_ops, x, upstream)
    assert g_node.dtype == torch.bfloat16
    torch.testing.assert_close(g_node, g_ops, atol=0, rtol=0)


def test_the_two_operations_remain_where_the_node_does_not_apply():
    """Sequence starts, a continued stream, a kept rotated stream, partial rotation or tables that take a
    gradient each take the two operations, with the same values."""
    x, cos, sin = stream(T=9)
    starts = torch.zeros(2, 9, dtype=torch.bool)
    starts[0, 4] = True
    prev = torch.randn(2, 3, 1, 16, dtype=torch.float64)
    for kwargs in ({"starts": starts}, {"prev": prev}):
        out = rope_shear(x, cos, sin, 0.5, **kwargs)
        assert type(out.grad_fn).__name__ != "_RotateShearBackward"
        torch.testing.assert_close(out, shear(apply_rope(x, cos, sin), 0.5, **kwargs))
    assert type(rotate_and_shear(x, cos, sin, 0.5)[1].grad_fn).__name__ != "_RotateShearBackward"  # keeps the rotated
    half = RotaryEmbedding(16, rotary_fraction=0.5)(torch.arange(9)[None].expand(2, 9))
    out = rope_shear(x, *(t.double() for t in half), 0.5)
    torch.testing.assert_close(out, shear(apply_rope(x, *(t.double() for t in half)), 0.5))
    cos_grad = cos.clone().requires_grad_()
    out = rope_shear(x, cos_grad, sin, 0.5)
    assert torch.autograd.grad(out.sum(), cos_grad)[0].abs().sum() > 0  # the tables get their gradient
    with pytest.raises(ValueError, match="do not fit a stream"):  # the node checks the tables as apply_rope does
        rope_shear(x, cos[:, :, :5], sin[:, :, :5], 0.5)
