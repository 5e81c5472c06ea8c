import pytest
import torch

from helpers import random_model
from psattn.models import AttentionConfig, generate
from psattn.models.keylag import KEY_LAG, _DepthwiseCausalConv, lagged

KEY_LAG_NAMES = sorted(KEY_LAG)


def perturb_key_lag(model, seed=0):
    """Move every key-lag parameter away from its initial value so the mixers really mix."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".key_lag." in name:
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return model


def keylag_model(variant, seed=0):
    return perturb_key_lag(random_model(variant, gamma=0.0, seed=seed), seed)


def test_lagged_matches_a_loop():
    x = torch.randn(2, 1, 7, 3)
    starts = torch.zeros(2, 7, dtype=torch.bool)
    starts[:, 0] = True
    starts[1, 4] = True
    for lag in (1, 2, 3, 9):
        got = lagged(x, lag, starts)
        for b in range(2):
            for t in range(7):
                seq_start = 4 if (b == 1 and t >= 4) else 0
                want = x[b, :, t - lag] if t - lag >= seq_start else torch.zeros_like(x[b, :, t])
                assert torch.equal(got[b, :, t], want)


@pytest.mark.parametrize("kernel", [3, 4])
def test_the_convolution_without_starts_equals_its_form_with_explicit_starts(kernel):
    """With t = 0 the only start the convolution reads views of one zero-padded stream; alone, it
    equals bit for bit, in value and gradients, the general form that masks each lag at the starts."""
    torch.manual_seed(0)
    conv = _DepthwiseCausalConv((3, 5), kernel, identity_init=False)
    x = torch.randn(2, 3, 9, 5, requires_grad=True)
    only_t0 = torch.zeros(2, 9, dtype=torch.bool)
    only_t0[:, 0] = True
    fast, general = conv(x, None), conv(x, only_t0)
    g = torch.randn_like(fast)
    assert torch.equal(fast, general)
    grads = torch.autograd.grad(fast, (x, conv.weight), g), torch.autograd.grad(general, (x, conv.weight), g)
    for a, b in zip(*grads, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("variant", KEY_LAG_NAMES)
def test_initial_or_neutral_weights_give_plain_attention(variant):
    model = random_model(variant, gamma=0.0, seed=5)
    baseline = random_model("baseline", gamma=0.0, seed=5)
    state = {k: v for k, v in model.state_dict().items() if ".key_lag." not in k}
    baseline.load_state_dict(state)
    with torch.no_grad():
        for block in model.blocks:
            lag = block.attn.key_lag
            if variant == "smeared_keys":
                lag.alpha.fill_(50.0)  # σ(α) = 1: no smear
            elif variant == "canon":
                lag.conv.weight.zero_()  # residual only
            # kv_shift and primer_dconv start at the identity
    x = torch.randint(0, 37, (2, 9))
    assert torch.allclose(model(x), baseline(x), atol=1e-10)


def test_kv_shift_with_shear_weights_is_the_key_only_shear():
    gamma = 0.7
    shift = random_model("kv_shift", gamma=0.0, seed=2)
    psa = random_model("key_only", gamma=gamma, seed=2)
    psa.load_state_dict({k: v for k, v in shift.state_dict().items() if ".key_lag." not in k})
    with torch.no_grad():
        for block in shift.blocks:
            block.attn.key_lag.key_weights[:] = torch.tensor([1 + gamma, -gamma])
    x = torch.randint(0, 37, (2, 9))
    assert torch.allclose(shift(x), psa(x), atol=1e-10)


@pytest.mark.parametrize("variant", KEY_LAG_NAMES)
def test_causal_and_sequence_boundaries(variant):
    model = keylag_model(variant)
    x = torch.randint(0, 37, (2, 10))
    y = x.clone()
    y[:, 6] = (y[:, 6] + 1) % 37
    assert torch.allclose(model(x)[:, :6], model(y)[:, :6], atol=1e-10)
    a, b = torch.randint(0, 37, (1, 4)), torch.randint(0, 37, (1, 6))
    packed = model(torch.cat([a, b], 1), position_ids=torch.cat([torch.arange(4), torch.arange(6)])[None])
    assert torch.allclose(packed[0, :4], model(a)[0], atol=1e-10)
    assert torch.allclose(packed[0, 4:], model(b)[0], atol=1e-10)
    padded = model(torch.cat([torch.zeros(1, 3, dtype=torch.long), a], 1), attention_mask=torch.tensor([[0, 0, 0, 1, 1, 1, 1]]))
    assert torch.allclose(padded[0, 3:], model(a)[0], atol=1e-10)


@pytest.mark.parametrize("variant", KEY_LAG_NAMES)
def test_parameters_receive_gradients(variant):
    model = random_model(variant, gamma=0.0).train()
    model(torch.randint(0, 37, (2, 8))).square().mean().backward()
    grads = [p.grad for n, p in model.named_parameters() if ".key_lag." in n]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("variant", KEY_LAG_NAMES)
def test_generation_runs_the_full_forward_and_a_cache_is_refused_clearly(variant):
    model = random_model(variant, gamma=0.0)
    assert not model.supports_cache and random_model("key_only").supports_cache
    prompt = torch.randint(0, 37, (2, 3))
    out = generate(model, prompt, 5)
    full = model(out.sequences)  # (B, 8, V): each new token is the argmax of the full forward before it
    assert torch.equal(out.sequences[:, 3:], full[:, 2:-1].argmax(-1))
    assert torch.allclose(out.logits, full[:, 2:-1], atol=1e-10)
    padded = generate(model, torch.cat([torch.zeros(1, 2, dtype=torch.long), prompt[:1]], 1), 5,
                      attention_mask=torch.tensor([[0, 0, 1, 1, 1]]))
    assert torch.equal(padded.sequences[0, 2:], out.sequences[0])  # a left-padded row equals it alone
    with pytest.raises(ValueError, match="does not support cached decoding"):
        model.new_cache()


def test_a_prefill_chunk_size_for_a_model_without_a_cache_is_said_not_to_apply():
    """A key-lag baseline runs the whole sequence at each step, so chunks of the prompt have nothing to carry them:
    the chunk size was ignored without a word; now a warning on the caller's line says so, and the tokens and
    logits are those of one pass."""
    model = keylag_model(KEY_LAG_NAMES[0])
    prompt = torch.randint(0, 37, (2, 7))
    with pytest.warns(UserWarning, match="prefill_chunk_size does not apply to a model without a cache") as caught:
        chunked = generate(model, prompt, 4, prefill_chunk_size=3)
    assert len(caught) == 1 and caught[0].filename == __file__  # the caller's line, not torch.no_grad's wrapper
    whole = generate(model, prompt, 4)
    assert torch.equal(chunked.sequences, whole.sequences) and torch.equal(chunked.logits, whole.logits)


def test_key_lag_takes_no_gamma():
    with pytest.raises(ValueError, match="takes no gamma"):
        AttentionConfig("smeared_keys", 0.5)
    assert AttentionConfig("canon").gammas == (0.0, 0.0)
