import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from psattn.ops.shear import momentum, previous, sequence_starts, shear, unshear
from psattn.ops.tracing import plain_ops_only


def shear_by_hand(x, gamma, starts, boundary):
    """Loop over positions: x̂_t = (1+γ) x_t − γ x_{t−1}, with the boundary rule at starts."""
    B, H, T, D = x.shape
    out = torch.empty_like(x)
    for b in range(B):
        for t in range(T):
            if t == 0 or starts[b, t]:
                x_prev = x[b, :, t] if boundary == "replicate" else torch.zeros_like(x[b, :, t])
            else:
                x_prev = x[b, :, t - 1]
            out[b, :, t] = (1 + gamma) * x[b, :, t] - gamma * x_prev
    return out


@pytest.mark.parametrize("boundary", ["replicate", "zero"])
@pytest.mark.parametrize("with_starts", [False, True])
def test_shear_matches_loop(boundary, with_starts):
    x = torch.randn(2, 3, 9, 4, dtype=torch.float64)
    starts = torch.zeros(2, 9, dtype=torch.bool)
    if with_starts:
        starts[0, 4] = starts[1, 2] = starts[1, 7] = True
    got = shear(x, 0.7, starts=starts if with_starts else None, boundary=boundary)
    assert torch.allclose(got, shear_by_hand(x, 0.7, starts, boundary))


def test_momentum_is_zero_at_starts_under_replicate():
    x = torch.randn(1, 2, 6, 3)
    starts = torch.tensor([[False, False, False, True, False, False]])
    p = momentum(x, starts=starts)
    assert torch.equal(p[:, :, 0], torch.zeros_like(p[:, :, 0]))
    assert torch.equal(p[:, :, 3], torch.zeros_like(p[:, :, 3]))
    assert torch.allclose(p[:, :, 4], x[:, :, 4] - x[:, :, 3])
    assert torch.allclose(momentum(x, boundary="zero")[:, :, 0], x[:, :, 0])


def test_prev_continues_a_stream():
    x = torch.randn(2, 3, 10, 4)
    full = shear(x, 1.3)
    tail = shear(x[:, :, 6:], 1.3, prev=x[:, :, 5:6])
    assert torch.allclose(full[:, :, 6:], tail, atol=1e-6)


@pytest.mark.parametrize("boundary", ["replicate", "zero"])
def test_one_decoded_row_after_prev_equals_the_full_streams_row(boundary):
    """A single row after ``prev`` takes a one-lerp path of its own (a decode step); only chunks of several rows
    were compared with the full stream, so that path could mix up the row and its predecessor unseen."""
    x = torch.randn(2, 3, 6, 4, dtype=torch.float64)
    full = shear(x, 0.8, boundary=boundary)
    for t in (1, 5):
        row = shear(x[:, :, t : t + 1], 0.8, prev=x[:, :, t - 1 : t], boundary=boundary)
        torch.testing.assert_close(row, full[:, :, t : t + 1])
    restart = shear(x[:, :, 5:6], 0.8, prev=x[:, :, 4:5], starts=torch.ones(2, 1, dtype=torch.bool), boundary=boundary)
    torch.testing.assert_close(restart, shear(x[:, :, 5:6], 0.8, boundary=boundary))  # a start ignores prev


@pytest.mark.parametrize("boundary", ["replicate", "zero"])
def test_fast_path_gradient_matches_generic_path(boundary):
    x = torch.randn(2, 3, 7, 5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 3, 7, 5, dtype=torch.float64)
    fast = torch.autograd.grad((shear(x, 0.6, boundary=boundary) * g).sum(), x)[0]
    generic = torch.autograd.grad((torch.lerp(previous(x, boundary=boundary), x, 1.6) * g).sum(), x)[0]
    assert torch.allclose(fast, generic)
    assert torch.autograd.gradcheck(lambda y: shear(y, 0.6, boundary=boundary), (x,))
    starts = torch.zeros(2, 7, dtype=torch.bool)
    starts[1, 3] = True
    assert torch.autograd.gradcheck(lambda y: shear(y, 0.6, starts=starts, boundary=boundary), (x,))


@pytest.mark.parametrize("boundary", ["replicate", "zero"])
def test_fast_path_has_second_order_and_forward_mode_ad(boundary):
    x = torch.randn(2, 3, 6, 4, dtype=torch.float64, requires_grad=True)
    assert not plain_ops_only()  # eager: shear() below runs the one-pass kernel
    fast = lambda y: shear(y, 0.7, boundary=boundary)  # noqa: E731
    assert torch.autograd.gradgradcheck(fast, (x,))
    assert torch.autograd.gradcheck(fast, (x,), check_forward_ad=True)


@pytest.mark.parametrize("boundary", ["replicate", "zero"])
def test_func_transforms_take_the_plain_ops_path_and_agree_with_the_filter(boundary):
    seen = []

    def sheared(y):
        seen.append(plain_ops_only())
        return shear(y, 0.7, boundary=boundary)

    generic = lambda y: torch.lerp(previous(y, boundary=boundary), y, 1.7)  # noqa: E731
    x, tangent = torch.randn(2, 3, 6, 4, dtype=torch.float64), torch.randn(2, 3, 6, 4, dtype=torch.float64)
    assert torch.allclose(torch.func.jvp(sheared, (x,), (tangent,))[1], generic(tangent))
    batch = torch.randn(3, 2, 3, 6, 4, dtype=torch.float64)
    assert torch.allclose(torch.func.vmap(sheared)(batch), generic(batch.flatten(0, 1)).view_as(batch))
    assert seen == [True, True]


def test_gamma_zero_is_identity():
    x = torch.randn(1, 1, 4, 2)
    assert shear(x, 0.0) is x


@settings(max_examples=40, deadline=None)
@given(
    T=st.integers(1, 12),
    gamma=st.floats(-0.45, 3.0, allow_nan=False),
    boundary=st.sampled_from(["replicate", "zero"]),
    seed=st.integers(0, 2**16),
)
def test_unshear_inverts_shear(T, gamma, boundary, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 2, T, 3, generator=g, dtype=torch.float64)
    starts = torch.rand(2, T, generator=g) < 0.2
    y = shear(x, gamma, starts=starts, boundary=boundary)
    assert torch.allclose(unshear(y, gamma, starts=starts, boundary=boundary), x, atol=1e-9)


@pytest.mark.parametrize("boundary", ["replicate", "zero"])
def test_unshear_continues_a_stream_from_prev(boundary):
    """unshear with ``prev`` inverts the shear of a chunk that continued a stream; only whole streams were
    inverted in the tests, so an unshear that restarted the chunk's first row (dropping prev) passed them."""
    x = torch.randn(2, 3, 7, 4, dtype=torch.float64)
    tail = shear(x, 0.6, boundary=boundary)[:, :, 4:]  # (B, H, 3, D): rows 4.. of the full stream's shear
    torch.testing.assert_close(unshear(tail, 0.6, prev=x[:, :, 3:4], boundary=boundary), x[:, :, 4:])


def test_sequence_starts_from_positions_and_padding():
    pos = torch.tensor([[0, 1, 2, 0, 1], [3, 4, 5, 6, 7]])
    assert sequence_starts(pos).tolist() == [[True, False, False, True, False], [False] * 5]
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert sequence_starts(attention_mask=mask).tolist() == [[False, False, True, False, False], [False] * 5]


@pytest.mark.parametrize("gamma", [math.nan, math.inf, -math.inf])
def test_non_finite_gamma_is_rejected(gamma):
    with pytest.raises(ValueError, match="finite"):
        shear(torch.randn(1, 1, 3, 2), gamma)


@pytest.mark.parametrize("gamma", [1e39, -2e4])
def test_gamma_beyond_what_float32_activations_hold_is_rejected(gamma):
    """1e39 is a finite Python float, but (1 + 2 gamma) times a key overflows float32."""
    with pytest.raises(ValueError, match="must lie within ±10000"):
        shear(torch.randn(1, 1, 3, 2), gamma)


def test_bad_inputs_name_the_problem():
    x = torch.randn(1, 1, 3, 2)
    with pytest.raises(TypeError, match="real number"):
        shear(x, "0.5")
    with pytest.raises(ValueError, match="boundary"):
        shear(x, 0.5, boundary="reflect")
    with pytest.raises(TypeError, match=r"boundary must be one of \('replicate', 'zero'\), got None"):
        shear(x, 0.5, boundary=None)  # a ValueError before, as if a misspelt rule
    with pytest.raises(ValueError, match=r"\(B, H, T, D\)"):
        shear(torch.randn(3, 2), 0.5)
    with pytest.raises(ValueError, match="starts"):
        shear(x, 0.5, starts=torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="not invertible"):
        unshear(x, -1.0)


@pytest.mark.parametrize("dtype", [torch.long, torch.bool])
def test_an_integer_stream_is_refused_by_the_shear(dtype):
    """lerp has no integer kernel: NotImplementedError '"lerp_kernel_scalar" not implemented for 'Long''."""
    with pytest.raises(TypeError, match=f"floating-point stream, got {dtype}"):
        shear(torch.ones(1, 1, 3, 2, dtype=dtype), 0.5)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(position_ids=[0, 1, 2]), TypeError, "position_ids must be a torch.Tensor"),  # returned False
    (dict(attention_mask=torch.ones(5)), ValueError, r"attention_mask must be \(B, T\), got shape \(5,\)"),
    (dict(position_ids=torch.arange(5)), ValueError, r"position_ids must be \(B, T\)"),  # a (5,) answer
    (dict(position_ids=torch.zeros(2, 3, dtype=torch.long), attention_mask=torch.ones(2, 4)), ValueError, "one shape"),
    (dict(attention_mask=torch.tensor([[0.0, 0.5, 1.0]])), TypeError,  # 0.5 was a real token
     r"^attention_mask must be bool or integer, 1 at real tokens and 0 at padding, got torch.float32$"),
])
def test_sequence_starts_refuses_what_is_not_a_batch_of_rows(kwargs, error, match):
    with pytest.raises(error, match=match):
        sequence_starts(**kwargs)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(attention_mask=torch.tensor([[0, 2, 2]])), ValueError,
     r"^attention_mask must hold 1 at real tokens and 0 at padding, got 2$"),
    (dict(attention_mask=torch.tensor([[1, -1, 1]], dtype=torch.int32)), ValueError, "got -1$"),
    (dict(position_ids=torch.tensor([[0.0, 0.5, 1.5]])), TypeError,
     r"^position_ids must be an integer tensor, got torch.float32$"),
    (dict(position_ids=torch.tensor([[True, False, True]])), TypeError, "got torch.bool$"),
])
def test_sequence_starts_refuses_mask_values_and_positions_it_would_misread(kwargs, error, match):
    """An integer mask's 2 or -1 was read as a real token, a float position 0.5 as no start, and a bool position
    False as a start: each is refused, as ``DecoderLM`` and ``generate`` refuse them; 0/1 masks of any integer
    dtype and bool masks pass."""
    with pytest.raises(error, match=match):
        sequence_starts(**kwargs)
    for dtype in (torch.bool, torch.int32, torch.uint8):
        mask = torch.tensor([[0, 1, 1], [1, 1, 1]], dtype=dtype)
        assert sequence_starts(attention_mask=mask).tolist() == [[False, True, False], [False] * 3]


@pytest.mark.parametrize("boundary", ["replicate", "zero"])
def test_the_exported_shear_is_adds_and_multiplies_and_equals_eager(boundary):
    """Under torch.export the shear is x + gamma (x - x_prev): no lerp, which on-device runtimes such as
    ExecuTorch cannot run, and the same values as the eager kernel."""
    class Shear(torch.nn.Module):
        def forward(self, x, starts):
            return shear(x, 0.7, starts=starts, boundary=boundary)

    x = torch.randn(2, 3, 6, 4)
    starts = torch.zeros(2, 6, dtype=torch.bool)
    starts[:, 0] = starts[1, 3] = True
    exported = torch.export.export(Shear(), (x, starts))
    assert not any("lerp" in str(node.target) for node in exported.graph.nodes)
    torch.testing.assert_close(exported.module()(x, starts), shear(x, 0.7, starts=starts, boundary=boundary))


def test_a_learnable_gamma_is_refused_rather_than_read_as_a_number():
    """γ is read with .item(): a γ that requires grad would silently never get a gradient."""
    x = torch.randn(1, 1, 3, 2)
    with pytest.raises(TypeError, match="a learnable gamma"):
        shear(x, torch.nn.Parameter(torch.tensor(0.5)))
    assert torch.equal(shear(x, torch.tensor(0.5)), shear(x, 0.5))  # a fixed 0-d tensor reads as its number


@pytest.mark.parametrize("T", [1, 4])
def test_a_prev_row_of_another_dtype_is_cast_to_the_streams(T):
    """prev is one more row of the stream: it is rounded to the stream's dtype, so a chunk continued
    from a float64 (or float32) row equals the chunk continued from that row in the stream's dtype."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, T, 4, generator=g)
    prev = torch.randn(2, 3, 1, 4, generator=g, dtype=torch.float64)
    for op in (shear, unshear):
        out = op(x, 0.7, prev=prev)
        assert out.dtype == x.dtype
        assert torch.equal(out, op(x, 0.7, prev=prev.float()))
    assert torch.equal(momentum(x.bfloat16(), prev=prev.float()), momentum(x.bfloat16(), prev=prev.bfloat16()))


def test_unshear_refuses_a_run_its_recursion_cannot_invert_and_inverts_shorter_ones():
    """For gamma < -1/2 the recursion multiplies rounding errors by |gamma / (1 + gamma)| per position: the
    'exact inverse' of 64 float32 positions at gamma = -0.8 was off by 1e30 (and inf at 256)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 64, 8, generator=g)
    with pytest.raises(ValueError, match=r"gamma = -0.8 is unstable here: .* = 4 per position, 63 times in a row: "
                                         r"torch.float32.s rounding error \(1.19e-07\) would grow past a relative 0.001"):
        unshear(shear(x, -0.8), -0.8)
    starts = (torch.arange(64) % 4 == 0)[None]  # runs of 4: three steps of the recursion each
    torch.testing.assert_close(unshear(shear(x, -0.8, starts=starts), -0.8, starts=starts), x, atol=1e-4, rtol=0)
    torch.testing.assert_close(unshear(shear(x, 0.8), 0.8), x)  # gamma > -1/2: any length


def test_unshear_of_an_empty_chunk_is_empty():
    y = torch.randn(2, 3, 0, 4)
    assert unshear(y, 0.5).shape == (2, 3, 0, 4)
    assert unshear(y, 0.5, prev=torch.randn(2, 3, 1, 4)).shape == (2, 3, 0, 4)
    assert shear(y, 0.5).shape == (2, 3, 0, 4)


@pytest.mark.parametrize("op", [shear, unshear, momentum])
def test_starts_and_prev_must_be_tensors_on_the_streams_device(op):
    x = torch.randn(1, 2, 3, 4)
    starts, prev = torch.zeros(1, 3, dtype=torch.bool), torch.randn(1, 2, 1, 4)
    kw = {} if op is momentum else {"gamma": 0.5}
    for name, value in (("starts", starts), ("prev", prev)):
        with pytest.raises(ValueError, match=f"{name} is on meta, the stream on cpu"):
            op(x, **kw, **{name: value.to("meta")})
        with pytest.raises(TypeError, match=f"{name} must be a torch.Tensor or None, got list"):
            op(x, **kw, **{name: value.tolist()})
    with pytest.raises(TypeError, match="prev must be a floating-point tensor"):
        op(x, **kw, prev=prev.long())
