"""capture and the head diagnostics on patched transformers models."""

import pytest
import torch

pytest.importorskip("transformers")

from integrations.hf_tiny import cache_kw, tiny_model  # noqa: E402
from psattn.integrations.hf import PSADynamicCache, apply_psa, remove_psa  # noqa: E402
from psattn.models.heads import head_scores, repeat_scores, repeated_tokens  # noqa: E402
from psattn.ops.attention import expand_kv_heads  # noqa: E402
from psattn.ops.hooks import capture, patch  # noqa: E402

LAYER = "model.layers.{}.self_attn.hook_{}"


def logits(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_pattern_hook_equals_the_eager_attention_weights(arch, prompt):
    model = apply_psa(tiny_model(arch), "symmetric", 0.9, attn_implementation="eager")
    with capture(model, "*.hook_pattern") as seen, torch.no_grad():
        out = model(prompt, output_attentions=True, use_cache=False)
    assert len(seen) == 2
    for i, weights in enumerate(out.attentions):
        torch.testing.assert_close(seen[LAYER.format(i, "pattern")], weights, atol=1e-6, rtol=1e-6)


def test_pattern_hook_with_padding_and_a_cache(prompt):
    model = apply_psa(tiny_model(), "key_only", 1.0, attn_implementation="eager")
    ids = torch.cat([torch.zeros(1, 3, dtype=torch.long), prompt], dim=1)  # left-padded
    mask = (ids != 0).long()
    with capture(model, "*.hook_pattern") as seen, torch.no_grad():
        out = model(ids, attention_mask=mask, output_attentions=True)  # default: with a cache
    pattern = seen[LAYER.format(0, "pattern")][..., 3:, :]  # the rows of real tokens (padding rows are moot)
    torch.testing.assert_close(pattern, out.attentions[0][..., 3:, :], atol=1e-6, rtol=1e-6)
    assert pattern[..., :3].abs().max() == 0  # real tokens never look at the padding


def test_score_terms_add_up_to_the_sheared_scores(prompt):
    model = apply_psa(tiny_model(), "symmetric", 0.6)
    with capture(model, "*.hook_score_terms", "*.hook_q*", "*.hook_k_sheared", "*.hook_k", "*.hook_v") as seen, torch.no_grad():
        model(prompt, use_cache=False)
    for i in range(2):
        terms = seen[LAYER.format(i, "score_terms")]
        q_hat, k_hat = seen[LAYER.format(i, "q_sheared")], seen[LAYER.format(i, "k_sheared")]
        assert seen[LAYER.format(i, "k")].shape == k_hat.shape == (1, 2, 9, 8)  # GQA: 2 KV heads
        scores = q_hat @ expand_kv_heads(k_hat, q_hat.shape[1]).transpose(-2, -1)  # (B, Hq, T, T)
        torch.testing.assert_close(terms.total(), scores)
        assert terms.t3.abs().max() > 0 and terms.t2.abs().max() > 0
        q, v = seen[LAYER.format(i, "q")], seen[LAYER.format(i, "v")]
        assert q.shape == q_hat.shape == (1, 4, 9, 8) and v.shape == (1, 2, 9, 8)
        torch.testing.assert_close(q_hat[..., 1:, :], q[..., 1:, :] + 0.6 * (q[..., 1:, :] - q[..., :-1, :]))


def test_with_a_cache_the_hook_points_see_the_new_positions_and_score_terms_are_not_recorded(prompt):
    model = apply_psa(tiny_model(), "key_only", 1.0)
    points = ("*.hook_k", "*.hook_k_sheared", "*.hook_v", "*.hook_score_terms")
    with capture(model, *points) as whole, torch.no_grad():
        model(prompt, use_cache=False)
    cache = PSADynamicCache(model.config)
    with torch.no_grad():
        model(prompt[:, :6], **cache_kw(cache), use_cache=True)
        with capture(model, *points) as step:
            model(prompt[:, 6:], **cache_kw(cache), use_cache=True)  # 3 new positions
    assert not any(name.endswith("score_terms") for name in step)  # the past raw keys are not kept
    for name in (LAYER.format(i, p) for i in range(2) for p in ("k", "k_sheared", "v")):
        assert step[name].shape[-2] == 3  # the chunk, as in psattn's own layer
        torch.testing.assert_close(step[name], whole[name][..., 6:, :], atol=1e-10, rtol=0)


def patched(model, replacements, *args, **kwargs):
    """model(*args, **kwargs) with each named hook point returning the given tensor."""
    handles = [model.get_submodule(n).register_forward_hook(lambda _m, _i, _o, t=t: t) for n, t in replacements.items()]
    try:
        with torch.no_grad():
            return model(*args, **kwargs).logits
    finally:
        for h in handles:
            h.remove()


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_patched_raw_keys_and_queries_are_sheared_downstream(prompt, attn):
    """As in psattn's own layer: a replacement at hook_k (hook_q) flows through the shear, so it gives
    what the sheared replacement at hook_k_sheared (hook_q_sheared) gives."""
    model = apply_psa(tiny_model(), "symmetric", 0.7, attn_implementation=attn)
    other = torch.roll(prompt, 3, dims=1)
    with capture(model, "model.layers.0.self_attn.hook_*") as seen, torch.no_grad():
        model(other, use_cache=False)
    with torch.no_grad():
        plain = model(prompt, use_cache=False).logits
    for raw in ("k", "q"):
        before = patched(model, {LAYER.format(0, raw): seen[LAYER.format(0, raw)]}, prompt, use_cache=False)
        after = patched(model, {LAYER.format(0, f"{raw}_sheared"): seen[LAYER.format(0, f"{raw}_sheared")]},
                        prompt, use_cache=False)
        torch.testing.assert_close(before, after, atol=1e-5, rtol=1e-5)
        assert (before - plain).abs().max() > 1e-3, raw


def test_a_patched_pattern_is_the_one_attention_uses(prompt):
    model = apply_psa(tiny_model(), "key_only", 1.0)
    T = prompt.shape[1]
    uniform = torch.ones(T, T, dtype=next(model.parameters()).dtype).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(1, 4, T, T)  # (B, Hq, T, T)
    with capture(model, "model.layers.0.self_attn.hook_v") as seen:
        patched(model, {LAYER.format(0, "pattern"): uniform}, prompt, use_cache=False)
    out = {}
    handle = model.model.layers[0].self_attn.o_proj.register_forward_pre_hook(lambda _m, a: out.__setitem__("x", a[0]))
    patched(model, {LAYER.format(0, "pattern"): uniform}, prompt, use_cache=False)
    handle.remove()
    v = expand_kv_heads(seen[LAYER.format(0, "v")], 4)  # (B, Hq, T, D)
    mean_so_far = v.cumsum(2) / torch.arange(1, T + 1, dtype=v.dtype)[:, None]  # what uniform causal attention returns
    torch.testing.assert_close(out["x"], mean_so_far.transpose(1, 2).reshape(1, T, -1), atol=1e-6, rtol=1e-6)
    with torch.no_grad():
        assert (patched(model, {}, prompt, use_cache=False) - model(prompt, use_cache=False).logits).abs().max() == 0


def test_hook_points_go_with_remove_psa():
    model = remove_psa(apply_psa(tiny_model(), "key_only", 1.0))
    with pytest.raises(ValueError, match="no hook point"):
        with capture(model, "*.hook_pattern"):
            pass
    assert not any("hook_" in n for n, _ in model.named_modules())


def test_head_scores_on_a_transformers_model():
    model = apply_psa(tiny_model(), "key_only", 1.0, attn_implementation="eager")
    scores = head_scores(model, batch=4, half=6)
    assert scores.previous_token.shape == scores.induction.shape == (2, 4)
    rows = repeated_tokens(4, 6, model.config.vocab_size, torch.Generator().manual_seed(0))
    with torch.no_grad():
        attentions = torch.stack(model(rows, output_attentions=True).attentions)  # (L, B, H, T, T)
    t = torch.arange(1, rows.shape[1])
    torch.testing.assert_close(scores.previous_token, attentions[..., t, t - 1].mean(dim=(1, 3)), atol=1e-6, rtol=1e-6)
    second = torch.arange(7, 13)
    torch.testing.assert_close(scores.induction, attentions[..., second, second - 5].mean(dim=(1, 3)), atol=1e-6, rtol=1e-6)
    full = repeat_scores(model, rows, 6, offset=1)
    assert full.first_copy_loss > 0 and full.second_copy_loss > 0


def probe_rows(model, **kwargs) -> torch.Tensor:
    """The [BOS] + R + R rows ``head_scores(model, **kwargs)`` runs ``model`` on."""
    seen = []
    handle = model.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    try:
        head_scores(model, batch=32, half=8, **kwargs)
    finally:
        handle.remove()
    return seen[0]


def test_head_scores_start_rows_with_the_model_start_token_and_draw_no_special_token():
    """Rows started with id 0 (Llama's <unk>, GPT-2's "!") and R held the config's bos, eos and pad ids."""
    model = apply_psa(tiny_model(bos_token_id=5, eos_token_id=[6, 7], pad_token_id=0), "key_only", 1.0)
    rows = probe_rows(model)
    assert (rows[:, 0] == 5).all()
    assert not torch.isin(rows[:, 1:], torch.tensor([0, 5, 6, 7])).any()


def test_head_scores_start_a_model_without_bos_with_its_decoder_start_token_and_else_with_0():
    """A config with a decoder start token but no bos started rows with 0 and drew the start token into R."""
    rows = probe_rows(apply_psa(tiny_model(bos_token_id=None, decoder_start_token_id=9), "key_only", 1.0))
    assert (rows[:, 0] == 9).all() and not torch.isin(rows[:, 1:], torch.tensor([0, 9])).any()
    rows = probe_rows(apply_psa(tiny_model(bos_token_id=None), "key_only", 1.0))  # psattn's tasks' BOS
    assert (rows[:, 0] == 0).all() and (rows[:, 1:] > 0).all()


def test_head_scores_refuse_a_start_token_outside_the_vocabulary():
    """A config whose bos_token_id lies past the embedding failed inside it with "index out of range in self"."""
    model = apply_psa(tiny_model(bos_token_id=500), "key_only", 1.0)
    with pytest.raises(ValueError, match="start token 500 .* outside its vocabulary of 61"):
        head_scores(model, batch=2, half=4)


def test_head_scores_leave_out_the_tokenizer_special_ids_and_the_ids_past_it():
    """R was drawn from the whole embedding matrix: the tokenizer's special tokens and its never-trained rows."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, **{f"w{i}": i for i in range(1, 50)}}  # 50 ids of the model's 61
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="[PAD]")),
                                        pad_token="[PAD]", unk_token="[PAD]")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<sep>"]})  # id 50
    model = apply_psa(tiny_model(), "key_only", 1.0)
    rows = probe_rows(model, tokenizer=tokenizer)
    assert rows[:, 1:].max() < 50 and (rows[:, 1:] > 0).all()
    with pytest.raises(TypeError, match="tokenizer must be a transformers tokenizer"):
        head_scores(model, batch=2, half=4, tokenizer=vocab)


def test_head_scores_on_a_multimodal_model_read_the_vocabulary_of_its_language_model():
    # Gemma 3's multimodal wrapper keeps vocab_size in its text config (not on model.config)
    model = apply_psa(tiny_model("gemma3"), "key_only", 1.0)
    assert head_scores(model, batch=2, half=4).induction.shape == (2, 4)
    with pytest.raises(ValueError, match="at most the model's"):
        head_scores(model, batch=2, half=4, vocab_size=model.config.text_config.vocab_size + 1)


def test_head_scores_name_the_layer_of_each_row_of_a_hybrid_model():
    # Qwen3.5's four tiny layers: three gated delta-net layers, then the one attention layer
    scores = head_scores(apply_psa(tiny_model("qwen3_5_text"), "key_only", 1.0), batch=2, half=4)
    assert scores.induction.shape == (1, 4) and scores.layers == ("model.layers.3.self_attn",)


@pytest.mark.parametrize("point", ["k", "k_sheared", "v"])
def test_a_replacement_with_a_cache_is_what_the_cache_keeps(point, prompt):
    """Patching the new positions' keys or values while decoding with a cache gives what the same
    patch gives without one: the cache keeps the replacement."""
    model = apply_psa(tiny_model(), "symmetric", 0.8)
    double = {f"model.layers.*.self_attn.hook_{point}": lambda x: 2 * x}
    with patch(model, double), torch.no_grad():
        whole = model(prompt, use_cache=False).logits
        cache = PSADynamicCache(model.config)
        steps = [model(prompt[:, :5], **cache_kw(cache), use_cache=True).logits]
        steps += [model(prompt[:, t : t + 1], **cache_kw(cache), use_cache=True).logits for t in range(5, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), whole, atol=1e-10, rtol=0)
    assert not torch.allclose(whole, logits(model, prompt))  # the patch mattered, and is gone


def test_hook_out_is_the_output_before_the_projection(prompt):
    model = apply_psa(tiny_model(), "key_only", 0.8)
    with capture(model, LAYER.format(0, "out")) as seen, torch.no_grad():
        model(prompt)
    assert seen[LAYER.format(0, "out")].shape == (1, 9, 4 * 8)
    with patch(model, {LAYER.format(0, "out"): torch.zeros_like}):
        ablated = logits(model, prompt)
    with torch.no_grad():
        model.model.layers[0].self_attn.o_proj.weight.zero_()
    torch.testing.assert_close(ablated, logits(model, prompt), atol=1e-12, rtol=0)
