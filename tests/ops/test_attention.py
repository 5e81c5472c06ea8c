import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from psattn.ops.attention import ScoreTerms, attention_weights, psa_attention, psa_attention_reference, score_terms
from psattn.ops.shear import momentum, shear
from psattn.ops.variants import VARIANTS, variant_gammas


def qkv(B=2, Hq=4, Hkv=2, T=9, D=8, dtype=torch.float32, S=None):
    S = T if S is None else S
    return (torch.randn(B, Hq, T, D, dtype=dtype), torch.randn(B, Hkv, S, D, dtype=dtype),
            torch.randn(B, Hkv, S, D, dtype=dtype))


def test_gamma_zero_is_exactly_sdpa():
    q, k, v = qkv(Hkv=4)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(psa_attention(q, k, v, is_causal=True), expected)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("mask_kind", ["causal", "bool", "float", "none"])
def test_fast_path_equals_reference(variant, mask_kind):
    q, k, v = qkv()
    gamma_q, gamma_k = variant_gammas(variant, 0.9)
    kwargs = dict(gamma_q=gamma_q, gamma_k=gamma_k)
    if mask_kind == "causal":
        kwargs["is_causal"] = True
    elif mask_kind == "bool":
        kwargs["attn_mask"] = torch.rand(2, 1, 9, 9) < 0.7
        kwargs["attn_mask"][..., 0] = True
    elif mask_kind == "float":
        kwargs["attn_mask"] = torch.randn(2, 4, 9, 9)
    fast = psa_attention(q, k, v, **kwargs)
    ref = psa_attention_reference(q, k, v, **kwargs)
    assert torch.allclose(fast, ref, atol=1e-5), (fast - ref).abs().max()


def test_reference_forms_the_sheared_scores():
    q, k, v = qkv(Hkv=4)
    out, weights = psa_attention_reference(q, k, v, gamma_q=0.5, gamma_k=1.5, is_causal=True, scale=0.3,
                                           return_weights=True)
    scores = 0.3 * shear(q, 0.5) @ shear(k, 1.5).transpose(-2, -1)
    scores = scores.masked_fill(~torch.ones(9, 9, dtype=torch.bool).tril(), float("-inf"))
    assert torch.allclose(weights, scores.softmax(-1), atol=1e-6)
    assert torch.allclose(out, weights @ v, atol=1e-6)


def test_score_terms_sum_to_the_score_and_vanish_as_they_should():
    q, k, _ = qkv()
    starts = torch.zeros(2, 9, dtype=torch.bool)
    starts[1, 5] = True
    terms = score_terms(q, k, gamma_q=0.4, gamma_k=1.1, starts=starts)
    k_hat = shear(k, 1.1, starts=starts).repeat_interleave(2, dim=1)
    assert torch.allclose(terms.total(), shear(q, 0.4, starts=starts) @ k_hat.transpose(-2, -1), atol=1e-5)
    assert torch.allclose(terms.t1, q @ k.repeat_interleave(2, dim=1).transpose(-2, -1))
    key_only = score_terms(q, k, gamma_k=1.0)
    assert key_only.t2.abs().max() == 0 and key_only.t4.abs().max() == 0 and key_only.t3.abs().max() > 0
    with pytest.raises(TypeError, match=r"^q and k dtypes differ: torch.float32, torch.float64$"):
        score_terms(q, k.double())  # was "q, k, v dtypes differ", of a v it does not take


def test_score_terms_continue_a_cached_stream_from_prev_rows():
    """score_terms with prev_q and prev_k: their momenta continue the cached streams, so the terms sum to the
    scores of the continued shears; no test passed a prev row, and momenta that dropped prev_q went unseen."""
    q, k, _ = qkv(T=5, dtype=torch.float64)
    prev_q, prev_k = torch.randn(2, 4, 1, 8, dtype=torch.float64), torch.randn(2, 2, 1, 8, dtype=torch.float64)
    terms = score_terms(q, k, gamma_q=0.4, gamma_k=1.1, prev_q=prev_q, prev_k=prev_k)
    q_hat = shear(q, 0.4, prev=prev_q)
    k_hat = shear(k, 1.1, prev=prev_k).repeat_interleave(2, dim=1)  # (B, Hq, T, D)
    torch.testing.assert_close(terms.total(), q_hat @ k_hat.transpose(-2, -1))
    torch.testing.assert_close(terms.t2, 0.4 * (q - torch.cat([prev_q, q[:, :, :-1]], dim=2))
                               @ k.repeat_interleave(2, dim=1).transpose(-2, -1))


def test_score_terms_from_streams_repeat_key_heads_and_name_streams_that_do_not_fit():
    """Head counts that differ raised torch's 'The size of tensor a (4) must match the size of tensor b (3)'."""
    q, k, _ = qkv(Hq=4, Hkv=2)
    terms = ScoreTerms.from_streams(q, momentum(q), k, momentum(k), 0.4, 1.1)  # GQA: each key head serves two
    torch.testing.assert_close(terms.total(), score_terms(q, k, gamma_q=0.4, gamma_k=1.1).total())
    k3 = torch.randn(2, 3, 9, 8)
    with pytest.raises(ValueError, match=r"q \(2, 4, 9, 8\), k \(2, 3, 9, 8\): query heads \(4\) must be a multiple"):
        ScoreTerms.from_streams(q, momentum(q), k3, momentum(k3), 0.4, 1.1)
    with pytest.raises(ValueError, match=r"p_k \(2, 4, 9, 8\) on cpu must match k \(2, 2, 9, 8\)"):
        ScoreTerms.from_streams(q, momentum(q), k, momentum(q), 0.4, 1.1)
    with pytest.raises(TypeError, match="dtypes differ"):
        ScoreTerms.from_streams(q, momentum(q).double(), k, momentum(k), 0.4, 1.1)


@settings(max_examples=30, deadline=None)
@given(
    B=st.integers(1, 3), kv_heads=st.integers(1, 2), group=st.integers(1, 3), T=st.integers(1, 16),
    D=st.sampled_from([2, 4, 8]), gamma_q=st.floats(-1.0, 2.0), gamma_k=st.floats(-1.0, 2.0),
    boundary=st.sampled_from(["replicate", "zero"]), seed=st.integers(0, 2**16),
)
def test_property_fast_equals_reference(B, kv_heads, group, T, D, gamma_q, gamma_k, boundary, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, kv_heads * group, T, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, kv_heads, T, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, kv_heads, T, D, generator=g, dtype=torch.float64)
    kwargs = dict(gamma_q=gamma_q, gamma_k=gamma_k, is_causal=True, boundary=boundary)
    assert torch.allclose(psa_attention(q, k, v, **kwargs), psa_attention_reference(q, k, v, **kwargs), atol=1e-10)
    terms = score_terms(q, k, gamma_q=gamma_q, gamma_k=gamma_k, boundary=boundary)
    k_hat = shear(k, gamma_k, boundary=boundary).repeat_interleave(group, dim=1)
    assert torch.allclose(terms.total(), shear(q, gamma_q, boundary=boundary) @ k_hat.transpose(-2, -1), atol=1e-10)


def test_backward_through_fast_path_matches_reference():
    q, k, v = (x.double().requires_grad_() for x in qkv())
    grads = []
    for fn in (psa_attention, psa_attention_reference):
        out = fn(q, k, v, gamma_q=0.3, gamma_k=0.8, is_causal=True)
        grads.append(torch.autograd.grad(out.square().sum(), (q, k, v)))
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-10)


def test_causality_of_the_operator():
    q, k, v = qkv()
    out = psa_attention(q, k, v, gamma_q=1.0, gamma_k=1.0, is_causal=True)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    for x in (q2, k2, v2):
        x[:, :, 6:] += torch.randn_like(x[:, :, 6:])
    out2 = psa_attention(q2, k2, v2, gamma_q=1.0, gamma_k=1.0, is_causal=True)
    assert torch.allclose(out[:, :, :6], out2[:, :, :6])
    assert not torch.allclose(out[:, :, 6:], out2[:, :, 6:])


@pytest.mark.parametrize(
    "change,match,error",
    [
        (lambda q, k, v: (q, k[:, :, :-1], v), "differ in heads or length", ValueError),
        (lambda q, k, v: (q[..., :-1], k, v), "head dimensions differ", ValueError),
        (lambda q, k, v: (q[:, :3], k, v), "multiple", ValueError),
        (lambda q, k, v: (q, k.double(), v), "dtypes differ", TypeError),
        (lambda q, k, v: (q[0], k, v), r"\(B, H, T, D\)", ValueError),
        (lambda q, k, v: (q, k[:1], v[:1]), "batch sizes differ", ValueError),
        (lambda q, k, v: (q.long(), k, v), "floating-point", TypeError),
    ],
)
def test_bad_shapes_and_dtypes(change, match, error):
    with pytest.raises(error, match=match):
        psa_attention(*change(*qkv()), gamma_k=1.0)


def test_bad_mask_and_gamma():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="attn_mask"):
        psa_attention(q, k, v, attn_mask=torch.ones(9, 8, dtype=torch.bool))
    with pytest.raises(TypeError, match="attn_mask"):
        psa_attention(q, k, v, attn_mask=torch.ones(9, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="finite"):
        psa_attention(q, k, v, gamma_k=float("nan"))
    with pytest.raises(ValueError, match="unknown PSA variant"):
        variant_gammas("both", 1.0)
    with pytest.raises(TypeError, match=r"variant must be the name of a PSA variant .*got \['symmetric'\]"):
        variant_gammas(["symmetric"], 1.0)  # unhashable type: 'list'; then a ValueError, "unknown PSA variant"
    with pytest.raises(TypeError, match="variant must be the name of a PSA variant .*got None"):
        variant_gammas(None, 1.0)


def test_mismatched_devices():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="devices differ"):
        psa_attention(q, k.to("meta"), v, gamma_k=1.0)


def test_a_query_that_may_see_no_key_gets_zeros_on_both_paths():
    q, k, v = (torch.randn(1, 2, 4, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    mask[..., 2, :] = False
    fast = psa_attention(q, k, v, gamma_q=0.5, gamma_k=0.5, attn_mask=mask)
    reference = psa_attention_reference(q, k, v, gamma_q=0.5, gamma_k=0.5, attn_mask=mask)
    assert torch.allclose(fast, reference) and (reference[..., 2, :] == 0).all()


def test_starts_must_be_boolean():
    with pytest.raises(TypeError, match="bool"):
        shear(torch.randn(1, 1, 4, 2), 0.5, starts=torch.zeros(1, 4, dtype=torch.long))


def test_fast_path_scale_and_dropout_mean_what_they_mean_for_sdpa():
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 4, 9, 8, generator=g, dtype=torch.float64) for _ in range(3))
    kw = dict(gamma_q=0.4, gamma_k=0.9, is_causal=True)
    torch.testing.assert_close(psa_attention(q, k, v, scale=0.3, **kw), psa_attention_reference(q, k, v, scale=0.3, **kw))
    assert not torch.allclose(psa_attention(q, k, v, scale=0.3, **kw), psa_attention(q, k, v, **kw))
    torch.manual_seed(0)
    dropped = psa_attention(q, k, v, dropout_p=0.5, **kw)
    torch.manual_seed(0)
    assert torch.equal(psa_attention(q, k, v, dropout_p=0.5, **kw), dropped)  # reproducible from the seed
    assert not torch.allclose(dropped, psa_attention(q, k, v, **kw))


def test_the_reference_path_drops_attention_weights_as_sdpa_does():
    """psa_attention_reference's dropout_p drops attention weights (all of them at 1, some at 0.5); no test ran
    the reference path with dropout, so a reference that ignored dropout_p passed."""
    q, k, v = qkv(dtype=torch.float64)
    kw = dict(gamma_q=0.4, gamma_k=0.9, is_causal=True)
    assert torch.equal(psa_attention_reference(q, k, v, dropout_p=1.0, **kw), torch.zeros(2, 4, 9, 8, dtype=torch.float64))
    torch.manual_seed(0)
    assert not torch.allclose(psa_attention_reference(q, k, v, dropout_p=0.5, **kw), psa_attention_reference(q, k, v, **kw))


@pytest.mark.parametrize("backend", ["auto", "sdpa", "reference"])
def test_every_backend_takes_float32_streams_beside_bf16_values_under_autocast(backend):
    """Under autocast q and k may stay float32 beside a bf16 v (a model's projections leave them so):
    the reference takes them as the fast path does, and all give the same bf16 output."""
    q, k, v = qkv(Hkv=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = psa_attention(q, k, v.bfloat16(), gamma_q=0.5, gamma_k=0.8, is_causal=True, backend=backend)
    expected = psa_attention_reference(q, k, v, gamma_q=0.5, gamma_k=0.8, is_causal=True)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected, atol=0.05, rtol=0.05)


@pytest.mark.parametrize("backend", ["auto", "fused", "sdpa", "reference"])
@pytest.mark.parametrize("dropout_p,error", [(-0.5, ValueError), (1.5, ValueError), (float("nan"), ValueError),
                                             ("0.1", TypeError)])
def test_a_dropout_p_that_is_no_probability_is_refused_by_every_backend(backend, dropout_p, error):
    with pytest.raises(error, match="dropout_p"):
        psa_attention(*qkv(), gamma_k=0.5, dropout_p=dropout_p, backend=backend)


@pytest.mark.parametrize("backend", ["auto", "fused", "sdpa", "reference"])
def test_is_causal_with_an_attn_mask_is_refused_by_every_backend(backend):
    """SDPA documents the pair as an error, yet some of its kernels apply both: every backend refuses."""
    q, k, v = qkv()
    mask = torch.ones(9, 9, dtype=torch.bool)
    with pytest.raises(ValueError, match="not both"):
        psa_attention(q, k, v, gamma_k=0.5, attn_mask=mask, is_causal=True, backend=backend)


@pytest.mark.parametrize("backend", ["auto", "fused", "sdpa", "reference"])
def test_a_learnable_gamma_is_refused_by_name(backend):
    """γ is read as a number, so a γ that requires grad would silently never get a gradient."""
    gamma = torch.nn.Parameter(torch.tensor(0.5))
    with pytest.raises(TypeError, match="gamma_k must be a fixed number"):
        psa_attention(*qkv(), gamma_k=gamma, is_causal=True, backend=backend)
    out = psa_attention(*qkv(), gamma_k=gamma.detach(), is_causal=True, backend=backend if backend != "fused" else "auto")
    assert out.shape == (2, 4, 9, 8)  # a fixed tensor still reads as its number


@pytest.mark.parametrize("backend", ["auto", "sdpa", "reference"])
def test_a_prev_row_of_another_dtype_is_cast_to_the_streams(backend):
    """prev is one more row of the stream: a float64 row before a float32 chunk is read as float32 by
    every backend (the fused one too: tests/ops/test_fused_attention.py)."""
    q, k, v = qkv(T=5)
    prev_q, prev_k = torch.randn(2, 4, 1, 8, dtype=torch.float64), torch.randn(2, 2, 1, 8, dtype=torch.float64)
    kw = dict(gamma_q=0.4, gamma_k=0.7, is_causal=True)
    out = psa_attention(q, k, v, prev_q=prev_q, prev_k=prev_k, backend=backend, **kw)
    expected = psa_attention_reference(q, k, v, prev_q=prev_q.float(), prev_k=prev_k.float(), **kw)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("backend", ["auto", "fused", "sdpa", "reference"])
@pytest.mark.parametrize("name", ["attn_mask", "starts", "prev_k"])
def test_masks_starts_and_prev_rows_on_another_device_or_of_another_type_are_refused_by_name(backend, name):
    q, k, v = qkv()
    value = {"attn_mask": torch.ones(9, 9, dtype=torch.bool), "starts": torch.zeros(2, 9, dtype=torch.bool),
             "prev_k": torch.randn(2, 2, 1, 8)}[name]
    with pytest.raises(ValueError, match=f"{name} is on meta"):
        psa_attention(q, k, v, gamma_k=0.5, backend=backend, **{name: value.to("meta")})
    with pytest.raises(TypeError, match=f"{name} must be a torch.Tensor"):
        psa_attention(q, k, v, gamma_k=0.5, backend=backend, **{name: value.tolist()})


@pytest.mark.parametrize("backend", ["auto", "fused", "sdpa", "reference"])
@pytest.mark.parametrize("scale,error,match", [(float("nan"), ValueError, "scale must be finite"),
                                               (float("inf"), ValueError, "scale must be finite"),
                                               ("0.5", TypeError, "scale must be a number or None")])
def test_a_scale_that_is_no_finite_number_is_refused_by_every_backend(backend, scale, error, match):
    """NaN or inf made every output NaN; a string raised SDPA's words, or the reference path's 'only integer
    tensors of a single element can be converted to an index'."""
    with pytest.raises(error, match=match):
        psa_attention(*qkv(), gamma_k=0.5, is_causal=True, scale=scale, backend=backend)


@pytest.mark.parametrize("backend", ["auto", "sdpa"])
def test_a_scale_tensor_that_requires_grad_on_the_sdpa_path_names_the_backend_that_differentiates_it(backend):
    """SDPA refused it in its own words ("argument 'scale' must be float, not Tensor"); the reference path
    differentiates it, and a tensor that requires no grad is read as its number."""
    q, k, v = qkv()
    with pytest.raises(TypeError, match="needs backend='reference'"):
        psa_attention(q, k, v, gamma_k=0.5, is_causal=True, scale=torch.tensor(0.5, requires_grad=True), backend=backend)
    as_number = psa_attention(q, k, v, gamma_k=0.5, is_causal=True, scale=torch.tensor(0.5), backend=backend)
    torch.testing.assert_close(as_number, psa_attention(q, k, v, gamma_k=0.5, is_causal=True, scale=0.5, backend=backend))
    scale = torch.tensor(0.5, requires_grad=True)
    psa_attention(q, k, v, gamma_k=0.5, is_causal=True, scale=scale, backend="reference").sum().backward()
    assert scale.grad is not None and torch.isfinite(scale.grad)


@pytest.mark.parametrize("backend", ["auto", "fused", "sdpa", "reference"])
@pytest.mark.parametrize("is_causal", ["yes", None, 1])
def test_an_is_causal_that_is_no_bool_is_refused_by_every_backend(backend, is_causal):
    """SDPA refused it in its own words; the reference path read 'yes' as causal and None as not."""
    with pytest.raises(TypeError, match="is_causal must be True or False"):
        psa_attention(*qkv(), gamma_k=0.5, is_causal=is_causal, backend=backend)


def test_attention_weights_refuses_streams_that_do_not_fit_by_name():
    """attention_weights is public: mismatched heads, widths or masks raised torch's matmul and broadcast errors."""
    q, k, _ = qkv()
    with pytest.raises(ValueError, match=r"query heads \(3\) must be a multiple of key/value heads \(2\)"):
        attention_weights(torch.randn(2, 3, 9, 8), k)
    with pytest.raises(ValueError, match="head dimensions differ: 8 vs 4"):
        attention_weights(q, k[..., :4])
    with pytest.raises(ValueError, match=r"must be \(B, H, T, D\)"):
        attention_weights(q[0], k[0])
    with pytest.raises(ValueError, match="does not broadcast"):
        attention_weights(q, k, attn_mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="scale must be finite"):
        attention_weights(q, k, scale=float("nan"))


def test_a_row_an_additive_mask_leaves_no_key_gets_zero_weights_and_finite_gradients_as_in_sdpa():
    """The softmax of an all -inf row was NaN (zeroed in the forward pass, not in the backward: NaN dq and dk)."""
    q, k, v = (x.requires_grad_() for x in qkv(dtype=torch.float64))
    allowed = torch.ones(9, 9, dtype=torch.bool).tril()
    allowed[4] = False
    additive = torch.zeros(9, 9, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    results = {}
    for backend in ("sdpa", "reference"):
        out = psa_attention(q, k, v, gamma_q=0.5, gamma_k=0.5, attn_mask=additive, backend=backend)
        results[backend] = (out, *torch.autograd.grad(out.sum(), (q, k, v)))
    assert float(results["reference"][0].detach()[:, :, 4].abs().max()) == 0.0
    for ours, sdpa in zip(results["reference"], results["sdpa"], strict=True):
        torch.testing.assert_close(ours, sdpa, atol=1e-12, rtol=0)


def test_zero_key_value_heads_are_refused_by_name_not_divided_by():
    """The GQA check took query heads modulo key/value heads: a ZeroDivisionError on every path."""
    q, k, v = qkv()
    k, v = k[:, :0], v[:, :0]
    for call in (lambda: psa_attention(q, k, v, gamma_k=0.5, backend="sdpa"),
                 lambda: psa_attention(q, k, v, gamma_k=0.5, backend="reference"),
                 lambda: attention_weights(q, k), lambda: score_terms(q, k, gamma_k=0.5)):
        with pytest.raises(ValueError, match="at least one key/value head, got 0"):
            call()


def test_zero_query_heads_are_refused_by_name_and_score_terms_names_no_values():
    """score_terms of q with no heads (k with 2) repeated k to no heads, then blamed it: "q (2, 0, 9, 8), k (2, 0, 9, 8):
    k and v must have at least one key/value head"; psa_attention gave an empty output. score_terms and
    attention_weights, which take no values, named v. Empty sequences give empty terms."""
    q, k, v = qkv()
    for call in (lambda: score_terms(q[:, :0], k, gamma_k=0.5), lambda: score_terms(q[:, :0], k[:, :0]),
                 lambda: psa_attention(q[:, :0], k, v, gamma_k=0.5, backend="sdpa"),
                 lambda: psa_attention(q[:, :0], k, v, backend="reference"), lambda: attention_weights(q[:, :0], k)):
        with pytest.raises(ValueError, match=r"^q must have at least one head, got shape \(2, 0, 9, 8\)$"):
            call()
    for call in (lambda: score_terms(q, k[:, :0], gamma_q=0.5), lambda: attention_weights(q, k[:, :0])):
        with pytest.raises(ValueError, match="^k must have at least one key/value head, got 0$"):
            call()
    terms = score_terms(q[:, :, :0], k[:, :, :0], gamma_q=0.5, gamma_k=0.5)
    assert all(t.shape == (2, 4, 0, 0) for t in (terms.t1, terms.t2, terms.t3, terms.t4))
    assert score_terms(q, k[:, :, :0], gamma_k=0.5).t1.shape == (2, 4, 9, 0)


@pytest.mark.parametrize("scale", [0.0, -0.5])
@pytest.mark.parametrize("backend", ["auto", "sdpa"])
def test_a_causal_call_with_a_scale_of_zero_or_below_equals_the_reference(backend, scale):
    """PyTorch's CPU SDPA scales its causal mask's -inf too (-inf * 0 = NaN): every row but the first was NaN."""
    for S in (9, 12):  # Tq = Tk, and more keys than queries (the causal mask aligned top-left)
        q, k, v = qkv(S=S, dtype=torch.float64)
        out = psa_attention(q, k, v, gamma_k=0.5, is_causal=True, scale=scale, backend=backend)
        ref = psa_attention_reference(q, k, v, gamma_k=0.5, is_causal=True, scale=scale)
        torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8])
def test_an_integer_mask_is_refused_where_dtypes_may_differ_not_added_as_a_bias(dtype):
    """attention_weights and the reference backend under autocast took a 0/1 integer mask (transformers' form) as an
    additive bias: query 0 of a causal mask put weight 0.28 on later keys. psa_attention and SDPA refuse it."""
    q, k, v = qkv()
    causal = torch.ones(9, 9, dtype=dtype).tril()
    with pytest.raises(TypeError, match=f"bool .* or an additive float mask, got {dtype}"):
        attention_weights(q, k, attn_mask=causal)
    for backend in ("sdpa", "reference"):
        with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(TypeError, match="additive float mask"):
            psa_attention(q, k, v, gamma_k=0.5, attn_mask=causal, backend=backend)
    pattern = attention_weights(q, k, attn_mask=causal.bool())  # the bool mask: nothing above the diagonal
    assert float(pattern.triu(1).abs().max()) == 0.0
    torch.testing.assert_close(attention_weights(q, k, attn_mask=torch.zeros(9, 9, dtype=torch.float16)),
                               attention_weights(q, k))  # an additive float mask of another dtype still adds


@pytest.mark.parametrize("backend", ["auto", "sdpa", "reference"])
def test_a_zero_head_dimension_is_refused_by_every_backend(backend):
    """The reference path divided by sqrt(0) (ZeroDivisionError) where SDPA returned a result."""
    q, k, v = qkv()
    with pytest.raises(ValueError, match="positive head dimension D, got 0"):
        psa_attention(q[..., :0], k[..., :0], v, is_causal=True, backend=backend)
