"""The guarantees of apply_psa on every tested model type (psattn.integrations.hf.support.TINY).

CI runs one representative per attention family (``support.REPRESENTATIVES``); every other type runs
with ``-m hf_matrix`` (see conftest.py).
"""

import pytest
import torch

pytest.importorskip("transformers")

from integrations.hf_tiny import PAD, VOCAB, cache_kw, returned_cache, tiny_model  # noqa: E402
from psattn.integrations.hf import apply_psa, load_psa_model, psa_spec, remove_psa, set_psa_gamma  # noqa: E402
from psattn.integrations.hf.support import REPRESENTATIVES, TESTED, base_kernel  # noqa: E402

TYPES = [pytest.param(t, marks=() if t in REPRESENTATIVES else pytest.mark.hf_matrix) for t in TESTED]
GEN_TOL = dict(atol=2e-5, rtol=2e-6)  # generate returns float32 logits


def logits(model, ids, **kwargs):
    with torch.no_grad():
        return model(ids, use_cache=False, **kwargs).logits


def greedy(model, ids, n, **kwargs):
    """(sequences, per-step logits (B, n, V)) of greedy generate."""
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=PAD, **kwargs)
    return out.sequences, torch.stack(out.logits, dim=1).double()


def patched(model_type, variant="symmetric", gamma=0.8, model=None):
    model = tiny_model(model_type) if model is None else model
    return apply_psa(model, variant, gamma, attn_implementation=base_kernel(model_type))


@pytest.mark.parametrize("model_type", TYPES)
def test_gamma_zero_is_the_base_model_and_remove_psa_restores_it(model_type, prompt):
    model = tiny_model(model_type)
    before = logits(model, prompt)
    seq_plain, _ = greedy(model, prompt, 4)
    patched(model_type, gamma=0.0, model=model)
    assert torch.equal(logits(model, prompt), before)
    assert torch.equal(greedy(model, prompt, 4)[0], seq_plain)
    set_psa_gamma(model, 0.8)
    assert (logits(model, prompt) - before).abs().max() > 1e-3  # PSA changes the model
    remove_psa(model)
    assert torch.equal(logits(model, prompt), before)


@pytest.mark.parametrize("model_type", TYPES)
def test_cached_greedy_decoding_equals_the_full_forward(model_type, prompt):
    model = patched(model_type)
    n, T = 6, prompt.shape[1]
    seq, step_logits = greedy(model, prompt, n)
    torch.testing.assert_close(step_logits, logits(model, seq)[:, T - 1 : T - 1 + n].double(), **GEN_TOL)


# Gemma 2's eager attention (soft-capping) and Granite SWA's (sinks) give NaN on the padded rows in float64,
# without PSA too.
FLOAT32_PADDING = {"gemma2", "vaultgemma", "granite_swa", "granitemoe_swa"}


@pytest.mark.parametrize("model_type", TYPES)
def test_a_left_padded_batch_equals_its_rows_alone(model_type):
    model = patched(model_type, "key_only")
    if model_type in FLOAT32_PADDING:
        model.float()
    torch.manual_seed(3)
    long, short = torch.randint(1, VOCAB, (1, 10)), torch.randint(1, VOCAB, (1, 6))
    batch = torch.full((2, 10), PAD)
    batch[0], batch[1, 4:] = long[0], short[0]
    mask = torch.ones_like(batch)
    mask[1, :4] = 0
    seq, step_logits = greedy(model, batch, 4, attention_mask=mask)
    for row, ids in enumerate((long, short)):
        alone_seq, alone_logits = greedy(model, ids, 4)
        assert torch.equal(seq[row, -4:], alone_seq[0, -4:])
        torch.testing.assert_close(step_logits[row], alone_logits[0], **GEN_TOL)


@pytest.mark.parametrize("model_type", TYPES)
def test_a_left_padded_batch_decoded_by_hand_equals_its_rows_alone(model_type):
    """The cache as a caller drives it, without generate: a prefill, then one token a forward call with the cache,
    the attention mask and the positions, past the tiny configs' sliding windows (6 tokens). Both streams are sheared.
    The prompt is prefilled in two chunks: the short row's first is all padding, so its first token, a sequence start,
    comes after cached positions."""
    model = patched(model_type, "symmetric")
    tol = GEN_TOL
    if model_type in FLOAT32_PADDING:
        model.float()
        tol = dict(atol=1e-4, rtol=1e-5)  # float32 throughout
    ids = torch.randint(1, VOCAB, (2, 12), generator=torch.Generator().manual_seed(8))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache, chunks = None, [(0, 3), (3, 7)] + [(t, t + 1) for t in range(7, 12)]  # then one token a call
    with torch.no_grad():
        steps = []
        for a, b in chunks:
            out = model(ids[:, a:b], attention_mask=mask[:, :b], position_ids=positions[:, a:b], use_cache=True,
                        **({} if cache is None else cache_kw(cache)))
            cache = returned_cache(out)
            steps.append(out.logits)
    decoded = torch.cat(steps, 1)  # (2, 12, V)
    torch.testing.assert_close(decoded[:1], logits(model, ids[:1]), **tol)
    torch.testing.assert_close(decoded[1:, 4:], logits(model, ids[1:, 4:]), **tol)


def _lora_targets(model):
    """The names of the linear layers inside the first patched attention module (Moshi's inside its MoshiLinear)."""
    module = model._psa_state.modules[0]
    return sorted({name for name, m in module.named_modules() if isinstance(m, torch.nn.Linear)})


@pytest.mark.parametrize("model_type", TYPES)
def test_conversion_warmup_lora_save_reload_and_head_scores(model_type, tmp_path, prompt):
    """The conversion path: PSA at γ = 0, a short LoRA fine-tune while GammaWarmup raises γ, then
    save_pretrained, and AutoModelForCausalLM / load_psa_model give the same logits; head_scores runs."""
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM, TrainerControl, TrainerState

    from psattn.integrations.hf import GammaWarmup
    from psattn.models.heads import head_scores

    model = patched(model_type, "key_only", 0.0)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=4, target_modules=_lora_targets(model)))
    warmup, state = GammaWarmup(1.0, 2), TrainerState()
    optimizer = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-2)
    for step in range(3):
        state.global_step = step
        warmup.on_step_begin(None, state, TrainerControl(), model=lora)
        lora(prompt, labels=prompt, use_cache=False).loss.backward()
        optimizer.step(), optimizer.zero_grad()
    assert psa_spec(model).gamma == 1.0
    merged = lora.merge_and_unload().eval()
    want = logits(merged, prompt)
    merged.save_pretrained(tmp_path)
    for loaded in (AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64), load_psa_model(tmp_path)):
        assert psa_spec(loaded) == psa_spec(merged)
        # transformers rebuilds some buffers in float32 on load (RoPE frequencies, Gemma's embedding scale)
        torch.testing.assert_close(logits(loaded.double().eval(), prompt), want, atol=1e-5, rtol=1e-5)
    scores = head_scores(merged, batch=2, half=4)
    assert scores.induction.shape[0] == len(merged._psa_state.modules)


@pytest.mark.parametrize("model_type", TYPES)
def test_the_pattern_hook_is_the_pattern_eager_attention_uses(model_type, prompt):
    """hook_pattern recomputes the pattern (soft-capping and sinks included) as the model's eager kernel does."""
    from psattn.ops.hooks import capture

    model = apply_psa(tiny_model(model_type, attn_implementation="eager"), "key_only", 0.9, attn_implementation="eager")
    with capture(model, "*.hook_pattern") as seen, torch.no_grad():
        out = model(prompt, output_attentions=True, use_cache=False)
    names = {m: n for n, m in model.named_modules()}
    modules = model._psa_state.modules
    assert len(seen) == len(modules)
    # hybrids report weights for every layer (MiniMax: its linear-attention ones too) or for attention layers only
    by_layer = len(out.attentions) == model.config.get_text_config().num_hidden_layers
    for i, module in enumerate(modules):
        want = out.attentions[module.layer_idx if by_layer else i]
        torch.testing.assert_close(seen[names[module] + ".hook_pattern"], want, atol=1e-6, rtol=1e-6)


@pytest.mark.slow
def test_saved_psa_models_load_in_a_new_process(loaded_in_a_new_process):
    """After ``import psattn.integrations.hf``, a new process loads saved PSA models of the newer families
    (GPT-NeoX's renamed checkpoint keys, Gemma 2 on the eager kernel) with the same logits (conftest.py's
    fixture, whose process first loads test_hf_export.py's export)."""
    assert len(loaded_in_a_new_process["saved"]) == 2
    for expected, got in loaded_in_a_new_process["saved"]:
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
