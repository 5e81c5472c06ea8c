"""The fused PSA kernel against the fp64 reference, run on the CPU through Triton's interpreter.

The interpreter executes the same kernel source as a GPU does (tile by tile, in NumPy), so these
tests check the kernel's indexing, masking, boundary rule, GQA and backward; a GPU adds only the
compiler and the hardware's rounding (``benchmarks/gpu_check.py`` measures those)."""

import functools
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton and the kernels are built: run them on CPU tensors

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from psattn.ops import fused_attention, fused_widths  # noqa: E402

if not fused_attention.BUILT_FOR_INTERPRETER:  # Triton came in before TRITON_INTERPRET was set (tests/conftest.py sets it)
    pytest.skip("the kernels were built for a GPU in this process; benchmarks/gpu_check.py checks them there",
                allow_module_level=True)
if (reason := fused_attention.interpreter_unusable()) is not None:  # test_interpreter_unusable... checks the refusal
    pytest.skip(reason, allow_module_level=True)

from psattn.ops.attention import psa_attention, psa_attention_reference  # noqa: E402
from psattn.ops.fused_attention import shear_transpose  # noqa: E402
from psattn.ops.shear import shear  # noqa: E402
from psattn.ops.variants import VARIANTS, variant_gammas  # noqa: E402


def streams(B=2, Hq=4, Hkv=2, T=19, D=16, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, T, D, generator=g, dtype=dtype)
    k = torch.randn(B, Hkv, T, D, generator=g, dtype=dtype)
    v = torch.randn(B, Hkv, T, D, generator=g, dtype=dtype)
    return q, k, v


def forward_and_grads(backend, q, k, v, **kwargs):
    """The output and the gradients of every input of one call, for one fixed upstream gradient."""
    inputs = {"q": q, "k": k, "v": v, **{n: kwargs.pop(n) for n in ("prev_q", "prev_k") if kwargs.get(n) is not None}}
    leaves = {n: x.detach().clone().requires_grad_() for n, x in inputs.items()}
    out = psa_attention(leaves["q"], leaves["k"], leaves["v"], **kwargs, backend=backend,
                        **{n: leaves[n] for n in ("prev_q", "prev_k") if n in leaves})
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    grads = torch.autograd.grad(out, list(leaves.values()), upstream)
    return out, dict(zip(leaves, grads, strict=True))


def assert_matches_reference(q, k, v, atol=1e-12, **kwargs):
    out, grads = forward_and_grads("fused", q, k, v, **dict(kwargs))
    ref, ref_grads = forward_and_grads("reference", q, k, v, **dict(kwargs))
    torch.testing.assert_close(out, ref, atol=atol, rtol=0)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], atol=atol, rtol=0, msg=f"the gradient of {name} differs")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_forward_and_backward_equal_the_fp64_reference(variant):
    gamma_q, gamma_k = variant_gammas(variant, 0.7)
    assert_matches_reference(*streams(), gamma_q=gamma_q, gamma_k=gamma_k, is_causal=True)


@pytest.mark.parametrize("boundary", ["replicate", "zero"])
def test_sequence_starts_and_both_boundary_rules(boundary):
    q, k, v = streams(T=23)
    starts = torch.zeros(2, 23, dtype=torch.bool)
    starts[0, [5, 17]] = True  # packed documents; a start inside a tile and on a tile's first row
    starts[1, 16] = True
    assert_matches_reference(q, k, v, gamma_q=0.5, gamma_k=1.2, is_causal=True, starts=starts, boundary=boundary)


def test_a_chunk_that_continues_a_cached_stream_takes_prev_rows_and_passes_them_gradients():
    q, k, v = streams(T=21)
    g = torch.Generator().manual_seed(3)
    prev_q, prev_k = torch.randn(2, 4, 1, 16, generator=g, dtype=torch.float64), torch.randn(2, 2, 1, 16, generator=g,
                                                                                             dtype=torch.float64)
    assert_matches_reference(q, k, v, gamma_q=0.8, gamma_k=0.8, is_causal=True, prev_q=prev_q, prev_k=prev_k)


def test_prev_rows_of_another_dtype_are_cast_to_the_streams_as_on_every_other_backend():
    """A float64 row before a float32 chunk is one more float32 row, for the kernel as for the shear."""
    q, k, v = streams(T=7, dtype=torch.float32)
    g = torch.Generator().manual_seed(3)
    prev_q, prev_k = torch.randn(2, 4, 1, 16, generator=g, dtype=torch.float64), torch.randn(2, 2, 1, 16, generator=g,
                                                                                             dtype=torch.float64)
    kw = dict(gamma_q=0.6, gamma_k=0.9, is_causal=True)
    fused = psa_attention(q, k, v, prev_q=prev_q, prev_k=prev_k, backend="fused", **kw)
    assert torch.equal(fused, psa_attention(q, k, v, prev_q=prev_q.float(), prev_k=prev_k.float(), backend="fused", **kw))
    for backend in ("sdpa", "reference"):
        torch.testing.assert_close(psa_attention(q, k, v, prev_q=prev_q, prev_k=prev_k, backend=backend, **kw), fused)


@pytest.mark.parametrize(("Hq", "Hkv", "T", "D", "causal"), [(3, 1, 1, 16, True), (2, 2, 33, 32, False), (4, 1, 16, 16, True)])
def test_odd_lengths_gqa_groups_head_dims_and_no_mask(Hq, Hkv, T, D, causal):
    assert_matches_reference(*streams(B=1, Hq=Hq, Hkv=Hkv, T=T, D=D), gamma_q=0.3, gamma_k=1.0, is_causal=causal)


@pytest.mark.parametrize(("Tq", "Tk", "causal"), [(21, 7, True), (6, 19, True), (5, 18, False)])
def test_query_and_key_chunks_of_different_lengths_with_prev_rows(Tq, Tk, causal):
    """Tq != Tk (SDPA's causal mask aligned top-left): query tiles past the last key, key tiles past the last
    query, and each stream continuing its own prev row."""
    q, _, _ = streams(B=1, Hq=4, Hkv=2, T=Tq, seed=1)
    _, k, v = streams(B=1, Hq=4, Hkv=2, T=Tk, seed=2)
    g = torch.Generator().manual_seed(3)
    prev_q, prev_k = (torch.randn(1, h, 1, 16, generator=g, dtype=torch.float64) for h in (4, 2))
    assert_matches_reference(q, k, v, gamma_q=0.7, gamma_k=1.1, is_causal=causal, prev_q=prev_q, prev_k=prev_k)


def test_strided_streams_negative_couplings_the_zero_rule_and_a_scale_at_d_64():
    """q, k, v as a model passes them, (B, T, H, D) transposed to (B, H, T, D), at D 64, with negative
    couplings, the zero boundary rule after a prev row and starts, and a scale of the caller's."""
    q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in streams(B=2, Hq=2, Hkv=1, T=18, D=64))
    assert q.detach().clone().stride() == q.stride() != q.contiguous().stride()  # as forward_and_grads passes it
    starts = torch.zeros(2, 18, dtype=torch.bool)
    starts[1, [0, 16, 17]] = True
    prev_q, prev_k = (torch.randn(2, h, 1, 64, generator=torch.Generator().manual_seed(h), dtype=torch.float64)
                      for h in (2, 1))
    assert_matches_reference(q, k, v, gamma_q=-0.6, gamma_k=-1.3, is_causal=True, starts=starts, boundary="zero",
                             prev_q=prev_q, prev_k=prev_k, scale=0.3)


# the interpreter's NumPy warns about the lanes a tile masks out (overflow, inf - inf), which the kernel discards
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize(("Tq", "Tk", "causal", "atomic_dq"), [(17, 17, False, False), (20, 3, True, False),
                                                              (17, 17, False, True)])
def test_rows_whose_scores_are_all_very_negative_get_finite_query_gradients(Tq, Tk, causal, atomic_dq):
    """Keys past Tk in the last key tile score 0, and exp2(0 - lse) overflowed where every real score of
    a row is very negative: the dq̂ kernel multiplied that infinity by the zero row of k̂, making dq NaN
    (in fp16 from scores of about -14 on, when the probabilities are rounded for the product); the dk/dv
    kernel's atomic dq̂ (``backward_variant``) masks those keys too."""
    g = torch.Generator().manual_seed(0)
    q = 2.0 + 0.1 * torch.randn(1, 2, Tq, 16, generator=g, dtype=torch.float64)
    k = -2.0 + 0.1 * torch.randn(1, 1, Tk, 16, generator=g, dtype=torch.float64)  # q_t k_j / 4 near -16
    v = torch.randn(1, 1, Tk, 16, generator=g, dtype=torch.float64)
    upstream = torch.randn(1, 2, Tq, 16, generator=g, dtype=torch.float64)

    def out_and_grads(backend, dtype):
        leaves = [x.to(dtype).requires_grad_() for x in (q, k, v)]
        out = psa_attention(*leaves, gamma_q=0.5, gamma_k=0.5, is_causal=causal, backend=backend)
        return {"out": out, **dict(zip("qkv", torch.autograd.grad(out, leaves, upstream.to(dtype)), strict=True))}

    with fused_attention.backward_variant(atomic_dq=atomic_dq):
        fused = out_and_grads("fused", torch.float16)
    reference = out_and_grads("reference", torch.float64)
    for name, expected in reference.items():
        error = (fused[name].double() - expected).abs().max().item() / expected.abs().max().item()
        assert error < 3e-2, (name, error)  # fp16 rounding; the bug made dq NaN


@functools.cache
def _default_backward():
    """One call with GQA, sequence starts under the zero rule and prev rows: its arguments, and the default
    backward's gradients and the reference's."""
    q, k, v = streams(T=19)
    starts = torch.zeros(2, 19, dtype=torch.bool)
    starts[0, [5, 16]] = True
    g = torch.Generator().manual_seed(3)
    prev_q, prev_k = (torch.randn(2, h, 1, 16, generator=g, dtype=torch.float64) for h in (4, 2))
    call = dict(q=q, k=k, v=v, gamma_q=0.7, gamma_k=1.1, is_causal=True, starts=starts, boundary="zero", prev_q=prev_q,
                prev_k=prev_k)
    return call, forward_and_grads("fused", **dict(call))[1], forward_and_grads("reference", **dict(call))[1]


@pytest.mark.parametrize(("presheared", "atomic_dq"), [(True, False), (False, True), (True, True)])
def test_each_backward_variant_computes_the_defaults_gradients(presheared, atomic_dq):
    """``backward_variant``: q̂ and k̂ formed once before the loops, dq̂ added atomically by the dk/dv
    kernel, or both; the presheared loops give the default's gradients to the last bit (the pass rounds q̂ and k̂
    as the tiles do), the atomic adds may sum dq̂ in another order."""
    call, default, reference = _default_backward()
    with fused_attention.backward_variant(presheared=presheared, atomic_dq=atomic_dq):
        _, grads = forward_and_grads("fused", **dict(call))
    for name in reference:
        torch.testing.assert_close(grads[name], reference[name], atol=1e-12, rtol=0, msg=f"the gradient of {name} differs")
        torch.testing.assert_close(grads[name], default[name], atol=1e-15 if atomic_dq else 0.0, rtol=0)


def test_fixed_tiles_compute_the_same_function_as_the_default_tiles():
    q, k, v = streams(T=45, D=32)
    starts = torch.zeros(2, 45, dtype=torch.bool)
    starts[1, 33] = True
    with fused_attention.fixed_tiles(32):
        assert_matches_reference(q, k, v, gamma_q=0.4, gamma_k=0.9, is_causal=True, starts=starts)


def test_every_tile_shape_the_gpu_autotuner_tries_computes_the_same_function(monkeypatch):
    """The interpreter runs square tiles; a GPU autotunes over non-square ones, whose causal split needs
    BLOCK_M a multiple of BLOCK_N in the forward and dq kernels and the converse in the dk/dv kernel. The
    i-th shape of each kernel's list, over lengths that cross 128 rows, with starts in and across tiles."""
    configs = {name: [config.kwargs for config in tuned.configs] for name, tuned in fused_attention._TUNED.items()}
    q, k, v = streams(B=1, Hq=2, Hkv=1, T=150, D=16)
    starts = torch.zeros(1, 150, dtype=torch.bool)
    starts[0, [40, 129]] = True
    for i in range(max(map(len, configs.values()))):
        def launch(name, rows, heads, along, args, meta, i=i):
            tile = configs[name][i % len(configs[name])]  # {"BLOCK_M": ..., "BLOCK_N": ...}
            fused_attention._PLAIN[name][(-(-rows // tile[along]), heads)](*args, **tile, **meta)

        monkeypatch.setattr(fused_attention, "_launch", launch)
        assert_matches_reference(q, k, v, gamma_q=0.6, gamma_k=0.9, is_causal=True, starts=starts)
        assert_matches_reference(q, k[:, :, :97], v[:, :, :97], gamma_q=0.6, gamma_k=0.9)  # a shorter chunk of keys


@pytest.mark.parametrize("block,error", [(8, ValueError), (24, ValueError), (16.0, TypeError), (True, TypeError)])
def test_fixed_tiles_refuse_a_tile_the_kernels_cannot_take(block, error):
    """A tile of 24 rows failed deep in Triton ("arange's range must be a power of 2"), one of 8 ran in the
    interpreter but is below the 16 rows tl.dot takes on a GPU. A float (16.0) was a ValueError, as 24 is; it is a
    TypeError now."""
    with pytest.raises(error, match=rf"power of two of at least 16 rows a tile \(block\), got {block!r}"), \
            fused_attention.fixed_tiles(block):
        pass


@pytest.mark.parametrize("settings,error,message", [
    ({"num_warps": 3}, ValueError, r"a power of two from 1 to 32 warps \(num_warps\), got 3"),
    ({"num_warps": 64}, ValueError, r"a power of two from 1 to 32 warps \(num_warps\), got 64"),
    ({"num_warps": 4.0}, TypeError, r"a power of two from 1 to 32 warps \(num_warps\), got 4.0"),
    ({"num_stages": 0}, ValueError, r"a positive number of pipeline stages \(num_stages\), got 0"),
    ({"num_stages": None}, TypeError, r"a positive number of pipeline stages \(num_stages\), got None"),
])
def test_fixed_tiles_refuse_warps_and_stages_triton_cannot_launch(settings, error, message):
    """num_warps and num_stages were taken unchecked and reached Triton's launcher (3 warps, 0 stages, None)."""
    with pytest.raises(error, match=message), fused_attention.fixed_tiles(32, **settings):
        pass


def test_gamma_zero_equals_sdpa_and_fp32_stays_within_fp32_rounding():
    q, k, v = streams(dtype=torch.float32)
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(psa_attention(q, k, v, is_causal=True, backend="fused"), plain, atol=2e-6, rtol=0)
    reference = psa_attention_reference(q.double(), k.double(), v.double(), gamma_q=0.8, gamma_k=0.8, is_causal=True)
    fused = psa_attention(q, k, v, gamma_q=0.8, gamma_k=0.8, is_causal=True, backend="fused")
    assert (fused.double() - reference).abs().max() < 1e-5


def fp32_dv_error(scale):
    """The error of v's fp32 gradient against fp64, relative to its largest entry, from the fused kernel and from the
    reference, with q and k scaled by ``scale`` (the largest score of unit-scale streams at D 16 is 3.5; scale 100
    makes it 3.5e4). v's gradient is p^T dO: it shows how exact the backward's probabilities are."""
    q, k, v = (x.float().double() for x in streams(B=1, Hq=2, Hkv=2, T=16, D=16, seed=3))  # exact in fp32
    q, k = q * scale, k * scale
    upstream = torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def dv(backend, dtype):
        leaves = [x.to(dtype).requires_grad_() for x in (q, k, v)]
        out = psa_attention(*leaves, is_causal=True, backend=backend)
        return torch.autograd.grad(out, leaves[2], upstream.to(dtype))[0].double()

    exact = dv("reference", torch.float64)
    return {b: float((dv(b, torch.float32) - exact).abs().max() / exact.abs().max()) for b in ("fused", "reference")}


def test_fp32_probabilities_in_the_backward_lose_digits_as_the_scores_grow():
    """docs/kernel.md: the backward recomputes each score, and its sums may run in another order than the forward's
    (a transposed product, other tiles), so a probability exp2(s - lse) carries the score's rounding, about |s| times fp32's
    epsilon; the reference rounds the probabilities it kept. Harmless at unit scale, about 1e-3 at scores of 3.5e4 (the
    page's figure: this asserted only more than 1e-4)."""
    unit, large = fp32_dv_error(1.0), fp32_dv_error(100.0)
    assert unit["fused"] < 1e-6 and unit["reference"] < 1e-6
    assert 3e-3 > large["fused"] > 3e-4 and large["reference"] < 1e-6


def test_gradcheck_at_a_tiny_shape():
    q, k, v = (x.requires_grad_() for x in streams(B=1, Hq=2, Hkv=1, T=5, D=16))
    starts = torch.tensor([[False, False, False, True, False]])

    def attend(q, k, v):
        return psa_attention(q, k, v, gamma_q=0.6, gamma_k=1.1, is_causal=True, starts=starts, backend="fused")

    assert torch.autograd.gradcheck(attend, (q, k, v), fast_mode=True)


def test_a_second_derivative_through_the_kernel_is_refused_not_silently_zero():
    """The backward kernels' gradients carry no graph: under ``create_graph`` a gradient penalty on them
    got no contribution from the attention at all (a Hessian-vector product of 0), where SDPA refuses."""
    q, k, v = (x.requires_grad_() for x in streams(B=1, Hq=2, Hkv=1, T=5, D=16))
    out = psa_attention(q, k, v, gamma_q=0.6, gamma_k=1.1, is_causal=True, backend="fused")
    (dq,) = torch.autograd.grad(out.pow(2).sum(), q, create_graph=True)
    assert torch.equal(dq, torch.autograd.grad(out.pow(2).sum(), q, retain_graph=True)[0])  # the first derivative holds
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.grad(dq.pow(2).sum() + out.sum(), v)


def test_the_transposed_filter_is_the_shears_gradient_in_torch_and_in_the_backwards_kernel():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 19, 16, generator=g, dtype=torch.float64, requires_grad=True)  # two tiles of rows
    prev = torch.randn(2, 3, 1, 16, generator=g, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 3, 19, 16, generator=g, dtype=torch.float64)
    for starts in (None, torch.zeros(2, 19, dtype=torch.bool)):
        if starts is not None:
            starts[1, [0, 4, 16]] = True  # 16: the first row of the second tile
        for boundary in ("replicate", "zero"):
            for p in (None, prev):
                inputs = [x] if p is None else [x, p]
                expected = torch.autograd.grad(shear(x, 0.9, starts=starts, prev=p, boundary=boundary), inputs, upstream)
                replicate = boundary == "replicate"
                flags = None if starts is None else starts.to(torch.int8)
                for dx, dprev in (shear_transpose(upstream, 0.9, starts, p is not None, replicate),
                                  fused_attention._transpose_shear(upstream, 0.9, flags, x, p, replicate)):
                    torch.testing.assert_close(dx, expected[0], atol=1e-14, rtol=0)
                    if p is not None:
                        torch.testing.assert_close(dprev, expected[1], atol=1e-14, rtol=0)


def test_calls_the_kernel_cannot_take_fall_back_under_auto_and_are_refused_by_name():
    q, k, v = streams(dtype=torch.float32)
    mask = torch.ones(19, 19, dtype=torch.bool).tril()
    with pytest.raises(ValueError, match="explicit attn_mask"):
        psa_attention(q, k, v, gamma_k=0.5, attn_mask=mask, backend="fused")
    with pytest.raises(ValueError, match="head dimensions"):
        psa_attention(q[..., :12], k[..., :12], v[..., :12], gamma_k=0.5, backend="fused")
    assert fused_attention.HEAD_DIMS is fused_widths.HEAD_DIMS  # the widths models check when built
    with pytest.raises(ValueError, match="unknown backend"):
        psa_attention(q, k, v, backend="flash")
    learned = torch.tensor(0.3, requires_grad=True)  # the reference differentiates it; the kernel read it as a number
    with pytest.raises(ValueError, match="scale tensor that requires grad"):
        psa_attention(q, k, v, gamma_k=0.5, scale=learned, backend="fused")
    torch.testing.assert_close(psa_attention(q, k, v, gamma_k=0.5, scale=learned.detach(), backend="fused"),
                               psa_attention(q, k, v, gamma_k=0.5, scale=0.3, backend="fused"), rtol=0, atol=0)
    sdpa = psa_attention(q, k, v, gamma_k=0.5, attn_mask=mask, backend="sdpa")
    torch.testing.assert_close(psa_attention(q, k, v, gamma_k=0.5, attn_mask=mask), sdpa)  # auto on the CPU: SDPA


def test_every_other_call_the_kernel_cannot_take_is_refused_with_its_reason(monkeypatch):
    """docs/kernel.md lists what the kernel refuses; dropout, an empty sequence, a CPU tensor outside the
    interpreter, tracing by torch.compile and a missing Triton were refused by code no test ran."""
    from psattn.ops.attention import fused_unsupported

    q, k, v = streams(dtype=torch.float32)
    with pytest.raises(ValueError, match="cannot run this call: attention dropout"):
        psa_attention(q, k, v, gamma_k=0.5, is_causal=True, dropout_p=0.1, backend="fused")
    with pytest.raises(ValueError, match="cannot run this call: an empty sequence"):
        psa_attention(q[:, :, :0], k, v, gamma_k=0.5, backend="fused")
    assert fused_unsupported(q, k, v, None, 0.0, None, True) is None
    with monkeypatch.context() as patch:
        patch.setattr(torch.compiler, "is_compiling", lambda: True)
        assert fused_unsupported(q, k, v, None, 0.0, None, True).startswith("torch.compile")
    with monkeypatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "0")
        assert fused_unsupported(q, k, v, None, 0.0, None, True).startswith("tensors on cpu")
    with monkeypatch.context() as patch:
        find_spec = __import__("importlib.util").util.find_spec
        patch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "triton" else find_spec(name, *a))
        assert fused_unsupported(q, k, v, None, 0.0, None, True).startswith("Triton is not installed")


def test_in_fp16_the_kernel_and_the_shear_then_sdpa_have_the_same_error_several_times_plain_sdpas():
    """docs/kernel.md: both round q̂ and k̂ to half precision once, and that rounding of the sheared streams, not the
    number of operations before the product, sets PSA's error (the page quoted figures no test computed)."""
    q, k, v = (x.half() for x in streams(B=1, Hq=1, Hkv=1, T=40))
    exact = [x.double() for x in (q, k, v)]  # the rounded inputs: the error is the computation's
    kw = dict(gamma_q=0.8, gamma_k=0.8, is_causal=True)
    reference = psa_attention_reference(*exact, **kw)
    error = {b: (psa_attention(q, k, v, **kw, backend=b).double() - reference).abs().max().item() for b in ("fused", "sdpa")}
    plain = (F.scaled_dot_product_attention(q, k, v, is_causal=True).double()
             - F.scaled_dot_product_attention(*exact, is_causal=True)).abs().max().item()
    assert error["fused"] == pytest.approx(error["sdpa"], rel=0.05)
    assert min(error.values()) > 3 * plain


def test_float64_streams_stay_float64_under_autocast_as_on_the_other_backends():
    """Autocast leaves float64 alone, and SDPA and the reference kept it; the fused backend cast v to autocast's
    dtype and returned a 16-bit output (on a GPU it ran fp64 q and k in bf16 where it refuses fp64)."""
    q, k, v = streams(B=1, Hq=2, Hkv=1, T=19)
    kw = dict(gamma_q=0.7, gamma_k=0.7, is_causal=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = psa_attention(q, k, v, **kw, backend="fused")
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, psa_attention_reference(q, k, v, **kw), atol=1e-12, rtol=0)


def test_bf16_products_are_refused_by_name_where_the_interpreter_multiplies_bf16_wrongly():
    """Triton 3.9's interpreter multiplies bf16 tiles' raw bit patterns in ``tl.dot`` (docs/kernel.md): bf16 streams,
    bf16 autocast and bf16 score products gave outputs off by 8e8. The fused backend refuses them there by name;
    an interpreter that multiplies bf16 right runs them to bf16's rounding."""
    q, k, v = streams(B=1, Hq=1, Hkv=1, T=16, dtype=torch.float32)
    ref = psa_attention_reference(q.double(), k.double(), v.double(), gamma_k=1.0, is_causal=True)

    def bf16_streams():
        return psa_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), gamma_k=1.0, is_causal=True, backend="fused")

    def bf16_autocast():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return psa_attention(q, k, v, gamma_k=1.0, is_causal=True, backend="fused")

    def bf16_score_products():
        with fused_attention.score_products(torch.bfloat16):
            return psa_attention(q, k, v, gamma_k=1.0, is_causal=True, backend="fused")

    for call in (bf16_streams, bf16_autocast, bf16_score_products):
        try:
            out = call()
        except ValueError as err:  # refused, by name, only where the interpreter's bf16 product is wrong
            assert "bf16 products in Triton" in str(err) and fused_attention.interpreter_bf16_dot_wrong()
            continue
        torch.testing.assert_close(out.double(), ref, atol=5e-2, rtol=0)
    torch.testing.assert_close(psa_attention(q.half(), k.half(), v.half(), gamma_k=1.0, is_causal=True,
                                             backend="fused").double(), ref, atol=1e-2, rtol=0)  # fp16 still runs


def test_shapes_beyond_the_launch_grid_or_32_bit_offsets_are_refused_with_the_reason():
    row = torch.zeros(1, 1, 1, 16)
    many_heads = row.expand(65536, 1, 1, 16)  # views: no memory
    assert "at most 65,535" in fused_attention.unsupported(many_heads, many_heads, many_heads, None, 0.0, None)
    long = row.expand(1, 1, 2**27, 16)  # 2^31 elements
    assert "32-bit" in fused_attention.unsupported(long, long, long, None, 0.0, None)
    # q, k, v (B, H, T, D) sliced from a fused projection (B, T, H, 3 D): 2^30 elements each, whose offsets
    # reach 3 x 2^30 (meta tensors: no memory)
    qkv = torch.empty(1, 2**22, 16, 3 * 16, device="meta").transpose(1, 2)  # (B, H, T, 3 D)
    q, k, v = qkv.split(16, dim=-1)
    assert q.numel() < 2**31
    assert "32-bit" in fused_attention.unsupported(q, k, v, None, 0.0, None)
    assert fused_attention.unsupported(q[:, :, :2**20], k[:, :, :2**20], v[:, :, :2**20], None, 0.0, None) is None
    assert fused_attention.unsupported(row, row, row, None, 0.0, None) is None


def test_a_model_on_the_fused_kernel_equals_the_one_pass_model_in_logits_and_gradients(monkeypatch):
    """``DecoderLM(config, backend="fused")`` trains on the kernel; the default layers rotate and shear in
    one pass and call SDPA; both give the same logits and weight gradients (fp64, GQA, key-only in one
    layer and symmetric in the other)."""
    from psattn.models import AttentionConfig, DecoderLM, ModelConfig

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=23, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1,
                         attention=[AttentionConfig("key_only", 1.0), AttentionConfig("symmetric", 0.7)])
    ids = torch.randint(0, 23, (2, 13))
    calls = []
    kernel = fused_attention.fused_psa_attention
    monkeypatch.setattr(fused_attention, "fused_psa_attention", lambda *a, **kw: calls.append(1) or kernel(*a, **kw))
    results = []
    for backend in ("auto", "fused"):
        torch.manual_seed(1)
        model = DecoderLM(config, backend=backend).double()
        logits = model(ids)
        logits.pow(2).mean().backward()
        results.append((logits.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (one_pass, one_pass_grads), (fused, fused_grads) = results
    assert len(calls) == 2  # the fused model's two layers, and only those
    torch.testing.assert_close(fused, one_pass, atol=1e-12, rtol=0)
    for name, grad in one_pass_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, atol=1e-12, rtol=0, msg=f"the gradient of {name} differs")


def test_a_model_on_the_fused_kernel_runs_a_left_padded_batch_and_packed_documents_as_their_sequences_alone():
    """The kernel knows the causal mask alone: ``DecoderLM(config, backend="fused")`` handed it the padding mask of a
    left-padded batch and the document mask of packed ``position_ids``, and refused them ("an explicit attn_mask").
    Those batches attend with SDPA now (as ``"auto"`` does) and equal their sequences run alone."""
    from psattn.models import AttentionConfig, DecoderLM, ModelConfig

    config = ModelConfig(vocab_size=23, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1,
                         attention=AttentionConfig("symmetric", 0.7))
    torch.manual_seed(0)
    model = DecoderLM(config, backend="fused").double().eval()
    a, b = torch.randint(0, 23, (1, 3)), torch.randint(0, 23, (1, 5))
    padded = torch.cat([torch.cat([torch.zeros(1, 2, dtype=torch.long), a], 1), b])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1] * 5])
    out = model(padded, attention_mask=mask)
    torch.testing.assert_close(out[0, 2:], model(a)[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(out[1], model(b)[0], atol=1e-12, rtol=0)
    packed = model(torch.cat([a, b], 1), position_ids=torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4]]))
    torch.testing.assert_close(packed[0, :3], model(a)[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(packed[0, 3:], model(b)[0], atol=1e-12, rtol=0)


def test_the_score_product_takes_the_streams_dtype_unless_a_context_chooses_another():
    products = fused_attention.score_products_of
    for dtype, name in ((torch.float16, tl.float16), (torch.bfloat16, tl.bfloat16), (torch.float32, tl.float32),
                        (torch.float64, tl.float64)):
        assert products(dtype) == dict(PROD=name, ROW_SCALE=False)
    with fused_attention.score_products(torch.float16):
        assert products(torch.bfloat16) == dict(PROD=tl.float16, ROW_SCALE=True)
        assert products(torch.float32) == dict(PROD=tl.float16, ROW_SCALE=True)
        assert products(torch.float16) == dict(PROD=tl.float16, ROW_SCALE=False)  # its own dtype
    with fused_attention.score_products(torch.float32):
        assert products(torch.bfloat16) == dict(PROD=tl.float32, ROW_SCALE=False)  # fp32's range
    assert products(torch.bfloat16)["PROD"] == tl.bfloat16  # the context is left as found
    for dtype in (torch.int8, torch.float64):
        with pytest.raises(ValueError, match="not built"), fused_attention.score_products(dtype):
            pass


@pytest.mark.parametrize("size", [1.0, 3.0, 6.0])
def test_the_backward_recomputes_the_forwards_scores_in_the_dtype_the_forward_took(size):
    """With fp16 score products (scaled) on fp32 streams, the backward's probabilities must come from
    the same fp16 scores as the forward's log-sum-exp. Recomputed from fp32 scores they were off by the
    scores' rounding, which large logits amplify: dv's error grew to 0.016 at scores of about 180 and
    0.064 at about 720, where it stays near 0.003 now (q's and k's carry the fp16 scores' own rounding)."""
    q, k, v = streams(T=40, D=16, seed=5)
    q, k = size * q, size * k
    kw = dict(gamma_q=0.8, gamma_k=0.8, is_causal=True)
    upstream = torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def out_and_grads(backend, dtype):
        leaves = [x.to(dtype).requires_grad_() for x in (q, k, v)]
        out = psa_attention(*leaves, **kw, backend=backend)
        return {"out": out, **dict(zip("qkv", torch.autograd.grad(out, leaves, upstream.to(dtype)), strict=True))}

    with fused_attention.score_products(torch.float16):
        fused = out_and_grads("fused", torch.float32)
    reference = out_and_grads("reference", torch.float64)
    tolerance = {"out": 2e-2, "v": 5e-3, "q": 4e-2, "k": 4e-2}
    for name, expected in reference.items():
        error = (fused[name].double() - expected).abs().max().item() / expected.abs().max().item()
        assert error < tolerance[name], (name, error)


def test_a_backward_run_after_the_score_products_context_recomputes_the_forwards_scores():
    """``with score_products(...): out = f(...)`` and ``out.backward()`` outside it: the backward takes
    the switches its forward ran with, not those in force when it runs."""
    q, k, v = (3.0 * x if i < 2 else x for i, x in enumerate(streams(T=40, D=16, seed=6, dtype=torch.float32)))
    kw = dict(gamma_q=0.8, gamma_k=0.8, is_causal=True)
    upstream = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    grads = {}
    for inside in (True, False):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        with fused_attention.score_products(torch.float16):
            out = psa_attention(*leaves, **kw, backend="fused")
            if inside:
                out.backward(upstream)
        if not inside:
            out.backward(upstream)
        grads[inside] = [x.grad for x in leaves]
    for inside, outside in zip(grads[True], grads[False], strict=True):
        torch.testing.assert_close(outside, inside, rtol=0, atol=0)


@pytest.mark.parametrize("size", [1e-3, 1.0, 1e6])
def test_fp16_score_products_scale_each_row_into_range_whatever_its_size(size):
    """fp32 streams whose entries reach 10^6 (past fp16's 65,504) or stay near 10^-3 multiply in fp16
    with each row of q̂ and k̂ scaled by a power of two, and match the fp64 reference as closely as
    streams of ordinary size do."""
    q, k, v = streams(T=40, D=16, seed=3, dtype=torch.float32)
    q, k = size * q, size * k
    kw = dict(gamma_q=0.8, gamma_k=0.8, is_causal=True)
    reference = psa_attention_reference(q.double(), k.double(), v.double(), **kw)
    with fused_attention.score_products(torch.float16):
        out = psa_attention(q, k, v, **kw, backend="fused")
    assert (out.double() - reference).abs().max() < 5e-3
