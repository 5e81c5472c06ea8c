"""PSA inside transformers models: special cases, the cache against the full forward, padding, packing."""

import math

import pytest
import torch

pytest.importorskip("transformers")

from integrations.hf_tiny import CORE, EXTRA, PAD, VOCAB, cache_kw, tiny_model
from psattn.integrations.hf import apply_psa, remove_psa

VARIANTS = ["symmetric", "key_only", "query_only"]
TOL = dict(atol=1e-10, rtol=0)  # float64 forward passes
GEN_TOL = dict(atol=2e-5, rtol=2e-6)  # generate returns float32 logits


def greedy(model, ids, n, **kwargs):
    """(sequences, per-step logits (B, n, V)) of greedy generate."""
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, **kwargs)
    return out.sequences, torch.stack(out.logits, dim=1).double()


def full_logits(model, ids, **kwargs):
    with torch.no_grad():
        return model(ids, use_cache=False, **kwargs).logits


@pytest.mark.parametrize("arch", CORE + EXTRA)
def test_gamma_zero_equals_unpatched(arch, prompt):
    model = tiny_model(arch)
    before = full_logits(model, prompt)
    apply_psa(model, "symmetric", 0.0)
    assert torch.equal(full_logits(model, prompt), before)
    seq_psa, _ = greedy(model, prompt, 4)
    remove_psa(model)
    seq_plain, _ = greedy(model, prompt, 4)
    assert torch.equal(seq_psa, seq_plain)


@pytest.mark.parametrize("gqa", [False, True], ids=["mha", "gqa"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("arch", CORE)
def test_generate_with_cache_equals_full_forward(arch, variant, gqa, prompt):
    model = apply_psa(tiny_model(arch, gqa), variant, 0.8)
    n, T = 8, prompt.shape[1]
    seq, step_logits = greedy(model, prompt, n)
    full = full_logits(model, seq)
    torch.testing.assert_close(step_logits, full[:, T - 1 : T - 1 + n], **GEN_TOL)
    no_cache, _ = greedy(model, prompt, n, use_cache=False)
    assert torch.equal(seq, no_cache)


@pytest.mark.parametrize("arch", EXTRA)
def test_more_architectures_cache_equals_full_forward(arch, prompt):
    model = apply_psa(tiny_model(arch), "symmetric", 0.8)
    seq, step_logits = greedy(model, prompt, 5)
    torch.testing.assert_close(step_logits, full_logits(model, seq)[:, prompt.shape[1] - 1 : -1], **GEN_TOL)


def test_psa_changes_the_output(prompt):
    model = tiny_model("llama")
    before = full_logits(model, prompt)
    apply_psa(model, "key_only", 0.8)
    after = full_logits(model, prompt)
    assert torch.equal(after[:, 0], before[:, 0])  # the first token has no predecessor: momentum 0
    assert (after[:, 1:] - before[:, 1:]).abs().max() > 1e-3


def _reference_attention(gamma_q, gamma_k):
    """Hand-written eager PSA: q̂_t = (1+g) q_t - g q_{t-1} with q_{-1} := q_0, no cache, no padding."""

    def attend(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        def lift(x, g):
            prev = torch.cat([x[:, :, :1], x[:, :, :-1]], dim=2)
            return (1 + g) * x - g * prev

        q, k = lift(query, gamma_q), lift(key, gamma_k)
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-2, -1)) * scaling
        T = q.shape[2]
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
        return (scores.softmax(-1) @ v).transpose(1, 2), None

    return attend


@pytest.mark.parametrize("variant,gq,gk", [("symmetric", 0.8, 0.8), ("key_only", 0, 0.8), ("query_only", 0.8, 0)])
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_matches_hand_written_reference(arch, variant, gq, gk, prompt):
    from transformers import AttentionInterface

    AttentionInterface.register("psa_test_reference", _reference_attention(gq, gk))
    reference = tiny_model(arch)
    reference.set_attn_implementation("psa_test_reference")
    expected = full_logits(reference, prompt)
    model = apply_psa(tiny_model(arch), variant, 0.8)
    torch.testing.assert_close(full_logits(model, prompt), expected, **TOL)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("arch", ["llama", "qwen3", "mistral"])
def test_left_padded_batch_equals_each_sequence_alone(arch, variant):
    model = apply_psa(tiny_model(arch), variant, 0.8)
    torch.manual_seed(3)
    long, short = torch.randint(1, VOCAB, (1, 10)), torch.randint(1, VOCAB, (1, 6))
    batch = torch.full((2, 10), PAD)
    batch[0], batch[1, 4:] = long[0], short[0]
    mask = (batch != PAD).long()
    mask[0] = 1
    n = 6
    seq, logits = greedy(model, batch, n, attention_mask=mask)
    for row, ids in enumerate((long, short)):
        alone_seq, alone_logits = greedy(model, ids, n)
        assert torch.equal(seq[row, -n:], alone_seq[0, -n:])
        torch.testing.assert_close(logits[row], alone_logits[0], **GEN_TOL)


@pytest.mark.parametrize("variant", VARIANTS)
def test_packed_documents_equal_each_document_alone(variant):
    """Two documents in one row: position_ids restart at 0, so momentum restarts too."""
    model = apply_psa(tiny_model("llama"), variant, 0.8)
    torch.manual_seed(4)
    a, b = torch.randint(1, VOCAB, (1, 5)), torch.randint(1, VOCAB, (1, 7))
    packed = torch.cat([a, b], dim=1)
    position_ids = torch.cat([torch.arange(5), torch.arange(7)])[None]
    logits = full_logits(model, packed, position_ids=position_ids)
    torch.testing.assert_close(logits[:, :5], full_logits(model, a), **TOL)
    torch.testing.assert_close(logits[:, 5:], full_logits(model, b), **TOL)


def test_packed_documents_are_kept_apart_only_without_a_cache():
    """docs/huggingface.md says to pass use_cache=False with packed documents: transformers builds the mask that keeps
    them apart only then, so with a cache the second document attends to the first, in the plain model too. A
    transformers that keeps them apart with a cache fails here, and the page must change."""
    torch.manual_seed(4)
    a, b = torch.randint(1, VOCAB, (1, 5)), torch.randint(1, VOCAB, (1, 7))
    position_ids = torch.cat([torch.arange(5), torch.arange(7)])[None]
    for model in (tiny_model("llama"), apply_psa(tiny_model("llama"), "key_only", 0.8)):
        with torch.no_grad():
            cached = model(torch.cat([a, b], dim=1), position_ids=position_ids, use_cache=True).logits
        torch.testing.assert_close(cached[:, :5], full_logits(model, a), **TOL)
        assert (cached[:, 5:] - full_logits(model, b)).abs().max() > 1e-3  # the second document saw the first


@pytest.mark.parametrize("variant", VARIANTS)
def test_chunked_prefill_equals_full_forward(variant, prompt):
    from psattn.integrations.hf import PSADynamicCache

    model = apply_psa(tiny_model("qwen2"), variant, 0.8)
    cache = PSADynamicCache(model.config)
    with torch.no_grad():
        first = model(prompt[:, :4], **cache_kw(cache), use_cache=True).logits
        rest = model(prompt[:, 4:], **cache_kw(cache), use_cache=True).logits
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full_logits(model, prompt), **TOL)


def test_sampling_with_cache_equals_sampling_without(prompt):
    model = apply_psa(tiny_model("llama"), "symmetric", 0.8)
    runs = []
    for use_cache in (True, False):
        torch.manual_seed(11)
        with torch.no_grad():
            runs.append(model.generate(prompt, max_new_tokens=10, do_sample=True, top_k=20, use_cache=use_cache))
    assert torch.equal(*runs)


def test_eager_base_equals_sdpa_base(prompt):
    sdpa = apply_psa(tiny_model("llama"), "symmetric", 0.8)
    eager = apply_psa(tiny_model("llama"), "symmetric", 0.8, attn_implementation="eager")
    # eager takes its softmax in float32
    torch.testing.assert_close(full_logits(eager, prompt), full_logits(sdpa, prompt), atol=1e-5, rtol=0)
    seq, _ = greedy(eager, prompt, 5)
    assert torch.equal(seq, greedy(sdpa, prompt, 5)[0])
    with torch.no_grad():
        attentions = eager(prompt, output_attentions=True, use_cache=False).attentions
    assert len(attentions) == 2 and attentions[0].shape[-1] == prompt.shape[1]


@pytest.mark.parametrize("variant", VARIANTS)
def test_left_padding_without_position_ids_follows_the_mask(variant):
    """A plain forward call on a left-padded batch (positions 0..T-1, pads included): the first real
    token is a start because the mask hides its predecessor. (RoPE tables are float32, so shifted
    positions agree to ~1e-6 only, with or without PSA.)"""
    model = apply_psa(tiny_model("llama"), variant, 0.8)
    torch.manual_seed(5)
    ids = torch.randint(1, VOCAB, (1, 6))
    padded = torch.cat([torch.full((1, 3), PAD), ids], dim=1)
    mask = (padded != PAD).long()
    torch.testing.assert_close(full_logits(model, padded, attention_mask=mask)[:, 3:], full_logits(model, ids),
                               atol=1e-5, rtol=0)



def test_at_gamma_zero_sliding_window_layers_generate_as_the_base_model_with_either_cache(prompt):
    """A PSA cache keeps a sliding-window layer's window only, as the base model's own cache does: at γ = 0 generate
    gives the base model's logits bit for bit with its own (windowed) cache, and with a full-size DynamicCache() too."""
    from transformers import DynamicCache

    plain, psa = tiny_model("mistral").float(), apply_psa(tiny_model("mistral"), "key_only", 0.0).float()
    n = 8  # past the window of 6
    seq, steps = greedy(psa, prompt, n)
    own_seq, own_steps = greedy(plain, prompt, n)
    assert torch.equal(seq, own_seq) and torch.equal(steps, own_steps)
    (seq, steps), (full_seq, full_steps) = (greedy(m, prompt, n, **cache_kw(DynamicCache())) for m in (psa, plain))
    assert torch.equal(seq, full_seq) and torch.equal(steps, full_steps)


def test_moshi_past_its_window_generates_as_its_own_generate(prompt):
    """transformers' Moshi has no window in its mask (its full forward attends to every token) but its cache keeps
    the last ``sliding_window - 1`` keys only, so its own generate attends to the window only, past it. A PSA cache
    keeps the same window: past it, PSA's generate at γ = 0 is Moshi's own, not its full forward."""
    plain, psa = tiny_model("moshi", sliding_window=4), apply_psa(tiny_model("moshi", sliding_window=4), "key_only", 0.0)
    T, n = prompt.shape[1], 4
    seq, steps = greedy(psa, prompt, n, pad_token_id=PAD)
    plain_seq, plain_steps = greedy(plain, prompt, n, pad_token_id=PAD)
    assert torch.equal(seq, plain_seq) and torch.equal(steps, plain_steps)
    full = full_logits(plain, seq)[:, T - 1 : T - 1 + n]
    torch.testing.assert_close(full_logits(psa, seq), full_logits(plain, seq), **TOL)
    assert not torch.allclose(steps, full, **GEN_TOL)  # the window from the second step
    torch.testing.assert_close(steps[:, 0], full[:, 0], **GEN_TOL)
