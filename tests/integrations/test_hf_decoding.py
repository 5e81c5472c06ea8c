"""Beam search (cache reordering), assisted decoding (cache cropping) and the cache's contents."""

import contextlib
import copy
import pickle

import pytest
import torch

pytest.importorskip("transformers")

from transformers.cache_utils import DynamicLayer

from integrations.hf_tiny import cache_kw, returned_cache, tiny_model
from psattn.integrations.hf import PSADynamicCache, PSALayer, apply_psa
from psattn.integrations.hf.cache import PSASlidingWindowLayer
from psattn.ops.shear import shear


def _generate(model, ids, **kwargs):
    with torch.no_grad():
        return model.generate(ids, do_sample=False, **kwargs)


@pytest.mark.parametrize("variant", ["symmetric", "key_only"])
def test_beam_search_with_cache_equals_without(variant, prompt):
    model = apply_psa(tiny_model("llama"), variant, 0.8)
    kwargs = dict(max_new_tokens=8, num_beams=3, num_return_sequences=2)
    assert torch.equal(_generate(model, prompt, **kwargs), _generate(model, prompt, use_cache=False, **kwargs))


@pytest.mark.parametrize("assistant_psa", [False, True], ids=["plain-assistant", "psa-assistant"])
def test_assisted_decoding_equals_greedy(assistant_psa, prompt, monkeypatch):
    target = apply_psa(tiny_model("llama"), "symmetric", 0.8)
    assistant = tiny_model("llama", seed=1)  # different weights: its drafts are mostly rejected
    # Four drafts per step, however unsure the assistant is, so the target's cache is cropped back
    # several tokens at a time.
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    assistant.generation_config.num_assistant_tokens = 4
    assistant.generation_config.assistant_confidence_threshold = 0.0
    if assistant_psa:  # the assistant's own cache is cropped across several of its calls: give it a window
        apply_psa(assistant, "key_only", 0.5, max_rollback=4)
    removed = []
    crop = PSALayer.crop
    monkeypatch.setattr(PSALayer, "crop", lambda layer, n: (removed.append(-n), crop(layer, n))[1])
    kwargs = dict(max_new_tokens=12, return_dict_in_generate=True, output_logits=True)
    greedy = _generate(target, prompt, **kwargs)
    assert not removed
    assisted = _generate(target, prompt, assistant_model=assistant, **kwargs)
    assert torch.equal(assisted.sequences, greedy.sequences)
    # The target's logits at every new token too, not only their argmax.
    torch.testing.assert_close(torch.stack(assisted.logits), torch.stack(greedy.logits), atol=1e-10, rtol=0)
    assert max(removed) >= 2  # the test rolls PSA caches back by more than one token


@pytest.mark.parametrize("with_config", [False, True], ids=["bare", "from-config"])
def test_assisted_decoding_into_a_cache_the_caller_built_equals_greedy(with_config, prompt):
    """transformers hands the cache's layers ``activate_past_recording(recurrent_states_to_keep=...)``;
    a PSADynamicCache built from the config has its PSA layers before generate starts."""
    target = apply_psa(tiny_model("llama"), "symmetric", 0.8)
    assistant = tiny_model("llama", seed=1)
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    assistant.generation_config.num_assistant_tokens = 4
    cache = PSADynamicCache(target.config if with_config else None)
    assisted = _generate(target, prompt, max_new_tokens=8, assistant_model=assistant, **cache_kw(cache))
    assert torch.equal(assisted, _generate(target, prompt, max_new_tokens=8))


def test_a_bare_psa_cache_keeps_its_own_rollback_window(prompt):
    model = apply_psa(tiny_model("llama"), "key_only", 0.8)  # the model's own max_rollback is 0
    for cache in (PSADynamicCache(max_rollback=3), PSADynamicCache(model.config, max_rollback=3)):
        with torch.no_grad():
            model(prompt, use_cache=True, **cache_kw(cache))
            for token in (4, 6, 8):
                model(torch.tensor([[token]]), use_cache=True, **cache_kw(cache))
        assert [layer.shear_state.max_rollback for layer in cache.layers] == [3] * len(cache.layers)
        cache.crop(-3)  # three calls back: the window, not the last call, holds the raw keys
        assert cache.get_seq_length() == prompt.shape[1]


def test_a_psa_cache_built_for_a_hybrid_model_keeps_its_linear_attention_layers(prompt):
    from transformers import DynamicCache

    model = apply_psa(tiny_model("olmo_hybrid"), "symmetric", 0.8)
    cache = PSADynamicCache(model.config)
    plain = DynamicCache(config=model.config)
    assert [type(a).__name__ for a in cache.layers] == [
        "PSALayer" if type(b) is DynamicLayer else type(b).__name__ for b in plain.layers]
    assert "PSALayer" in {type(a).__name__ for a in cache.layers} != {"PSALayer"}
    with torch.no_grad():
        assert torch.equal(_generate(model, prompt, max_new_tokens=4, **cache_kw(cache)),
                           _generate(model, prompt, max_new_tokens=4))


def test_cache_stores_sheared_keys_and_constant_extra_state(prompt):
    raw_model = tiny_model("qwen3")
    model = apply_psa(tiny_model("qwen3"), "symmetric", 0.8)
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=6, do_sample=False, return_dict_in_generate=True)
        raw = returned_cache(raw_model(out.sequences[:, :-1], use_cache=True))
    cache = returned_cache(out)
    assert all(isinstance(layer, PSALayer) for layer in cache.layers)
    # Layer 0 sees the same inputs in both models: its cache holds the shear of the raw keys.
    first, raw_first = cache.layers[0], raw.layers[0]
    torch.testing.assert_close(first.keys, shear(raw_first.keys, 0.8), atol=1e-12, rtol=0)
    torch.testing.assert_close(first.values, raw_first.values, atol=1e-12, rtol=0)
    for layer in cache.layers:
        # After one-token decoding steps: the last raw key/query and the one before it (crop window).
        assert layer.shear_state.raw_k.values.shape[-2] == 2 and layer.shear_state.raw_q.values.shape[-2] == 2


def test_a_cache_whose_rows_are_selected_or_repeated_continues_each_row_as_its_full_forward(prompt):
    """batch_select_indices and batch_repeat_interleave (what transformers' generation utilities call on a filled
    cache) select or repeat the raw windows the next chunk shears against, with the keys. No test called them: a
    cache that left its raw windows alone passed."""
    model = apply_psa(tiny_model("llama"), "symmetric", 0.8)
    rows = torch.cat([prompt, prompt.flip(1)])  # (2, 9): two different rows
    with torch.no_grad():
        expected = model(rows, use_cache=False).logits[:, 6:]
        cache = PSADynamicCache(model.config)
        model(rows[:, :6], **cache_kw(cache), use_cache=True)
        cache.batch_select_indices(torch.tensor([1]))
        torch.testing.assert_close(model(rows[1:, 6:], **cache_kw(cache), use_cache=True).logits, expected[1:],
                                   atol=1e-10, rtol=0)
        cache = PSADynamicCache(model.config)
        model(rows[1:, :6], **cache_kw(cache), use_cache=True)
        cache.batch_repeat_interleave(2)
        suffixes = torch.cat([rows[1:, 6:], prompt[:, 6:]])  # (2, 3): the row's own, then another
        logits = model(suffixes, **cache_kw(cache), use_cache=True).logits
        torch.testing.assert_close(logits[:1], expected[1:], atol=1e-10, rtol=0)
        other = torch.cat([rows[1:, :6], prompt[:, 6:]], dim=1)
        torch.testing.assert_close(logits[1:], model(other, use_cache=False).logits[:, 6:], atol=1e-10, rtol=0)


def test_key_only_keeps_no_raw_queries(prompt):
    model = apply_psa(tiny_model("llama"), "key_only", 0.8)
    cache = PSADynamicCache(model.config)
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=3, do_sample=False, **cache_kw(cache))
    assert all(layer.shear_state.raw_q.values is None and layer.shear_state.raw_k.values is not None for layer in cache.layers)
    assert 0 < cache.extra_state_bytes() < cache.kv_bytes() / 4


def test_crop_within_the_last_call_is_exact_and_beyond_raises(prompt):
    model = apply_psa(tiny_model("llama"), "symmetric", 0.8)
    cache = PSADynamicCache(model.config)
    with torch.no_grad():
        model(prompt[:, :5], **cache_kw(cache), use_cache=True)
        model(prompt[:, 5:], **cache_kw(cache), use_cache=True)  # 4 tokens
        cache.crop(-3)  # back to 6 tokens: within the last call
        logits = model(prompt[:, 6:], **cache_kw(cache), use_cache=True).logits
        expected = model(prompt, use_cache=False).logits[:, 6:]
        torch.testing.assert_close(logits, expected, atol=1e-10, rtol=0)
        with pytest.raises(ValueError, match="max_rollback"):
            cache.crop(-5)


def test_max_rollback_allows_deeper_crops(prompt):
    model = apply_psa(tiny_model("llama"), "key_only", 0.8)
    cache = PSADynamicCache(model.config, max_rollback=4)
    with torch.no_grad():
        for t in range(prompt.shape[1]):
            model(prompt[:, t : t + 1], **cache_kw(cache), use_cache=True)
        cache.crop(-4)
        logits = model(prompt[:, -4:], **cache_kw(cache), use_cache=True).logits
        torch.testing.assert_close(logits, model(prompt, use_cache=False).logits[:, -4:], atol=1e-10, rtol=0)
    assert all(layer.shear_state.raw_k.values.shape[-2] <= 4 + 1 + 4 for layer in cache.layers)


@pytest.mark.parametrize("keep_last_call,held", [(True, 120), (False, 1)])
def test_keep_last_call_decides_the_state_right_after_a_prefill(keep_last_call, held):
    model = apply_psa(tiny_model("llama"), "symmetric", 0.8, keep_last_call=keep_last_call)
    long_prompt = torch.randint(1, 61, (2, 120))
    with torch.no_grad():
        out = model(long_prompt, use_cache=True)
        cache = returned_cache(out)
        assert all(layer.shear_state.raw_k.values.shape[-2] == held for layer in cache.layers)
        suffix = torch.tensor([[3, 4], [5, 6]])
        steps = torch.cat([model(suffix[:, t : t + 1], **cache_kw(cache), use_cache=True).logits for t in (0, 1)], 1)
        full = model(torch.cat([long_prompt, suffix], 1), use_cache=False).logits
    assert all(layer.shear_state.raw_k.values.shape[-2] == (2 if keep_last_call else 1) for layer in cache.layers)
    torch.testing.assert_close(steps, full[:, -2:], atol=1e-10, rtol=0)


def test_without_the_last_call_a_crop_is_refused_unless_announced(prompt):
    model = apply_psa(tiny_model("llama"), "symmetric", 0.8, keep_last_call=False)
    cache = PSADynamicCache(model.config, keep_last_call=False)
    with torch.no_grad():
        model(prompt[:, :5], **cache_kw(cache), use_cache=True)
        model(prompt[:, 5:], **cache_kw(cache), use_cache=True)
        with pytest.raises(ValueError, match="max_rollback"):
            cache.crop(-3)
        assert cache.get_seq_length() == prompt.shape[1]  # the refused crop changed nothing
        cache = PSADynamicCache(model.config, keep_last_call=False)
        cache.activate_past_recording()  # what transformers calls before a generation that rolls back
        model(prompt[:, :5], **cache_kw(cache), use_cache=True)
        model(prompt[:, 5:], **cache_kw(cache), use_cache=True)
        cache.crop(-3)
        logits = model(prompt[:, 6:], **cache_kw(cache), use_cache=True).logits
    torch.testing.assert_close(logits, model(prompt, use_cache=False).logits[:, 6:], atol=1e-10, rtol=0)


def test_a_keep_last_call_false_model_cannot_be_the_target_of_assisted_decoding(prompt):
    target = apply_psa(tiny_model("llama"), "key_only", 0.8, keep_last_call=False)
    with pytest.raises(ValueError, match="roll"):
        _generate(target, prompt, max_new_tokens=12, assistant_model=tiny_model("llama", seed=1))


def test_the_old_name_of_the_transformers_cache_still_works_with_a_warning():
    import psattn.integrations.hf as hf

    with pytest.warns(DeprecationWarning, match="PSADynamicCache"):
        assert hf.PSACache is PSADynamicCache
    with pytest.raises(AttributeError):
        hf.NoSuchThing  # noqa: B018


@pytest.mark.parametrize("variant", ["key_only", "symmetric"])
def test_one_crop_rule_in_both_caches(variant):
    """The library's LayerCache and transformers' PSALayer keep one ShearState: the same chunks and
    the same crops leave the same sheared keys and the same raw windows, and the same crop too deep
    is refused by both with the same error, changing nothing."""
    from psattn.integrations.hf.spec import PSASpec
    from psattn.ops.cache import LayerCache

    spec = PSASpec(variant, 0.8, max_rollback=2, keep_last_call=False)
    ours = LayerCache(keep_query=spec.gamma_q != 0.0, keep_key=True, max_rollback=2)
    theirs = PSALayer(max_rollback=2, keep_last_call=False)
    torch.manual_seed(0)

    def add(T):
        raw_q, raw_k, v = torch.randn(1, 4, T, 8), torch.randn(1, 2, T, 8), torch.randn(1, 2, T, 8)
        starts = torch.zeros(1, T, dtype=torch.bool)
        starts[:, 0] = len(ours) == 0
        prev_q, prev_k = ours.last_raw()
        q_hat = shear(raw_q, spec.gamma_q, starts=starts, prev=prev_q)
        keys, _ = ours.append(shear(raw_k, spec.gamma_k, starts=starts, prev=prev_k), v, raw_k=raw_k, raw_q=raw_q)
        theirs.prepare(spec)  # the steps of the PSA attention function
        theirs.update(raw_k, v)
        assert torch.equal(theirs.shear("q", raw_q, starts), q_hat)
        their_keys, _ = theirs.store(theirs.shear("k", raw_k, starts), v)
        assert torch.equal(their_keys, keys)

    def same_state():
        assert len(ours) == theirs.get_seq_length()
        assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)
        for stream in ("q", "k"):
            mine, other = ours.shear_state.window(stream), theirs.shear_state.window(stream)
            assert (mine.start, mine.end) == (other.start, other.end)
            assert (mine.values is None and other.values is None) or torch.equal(mine.values, other.values)

    for T in (5, 1, 3):
        add(T)
    same_state()
    ours.crop(7)  # the library's length ...
    theirs.crop(-2)  # ... and transformers' number of tokens to remove: one rule
    same_state()
    add(2)
    same_state()
    with pytest.raises(ValueError, match="max_rollback >= 4") as refused_ours:
        ours.crop(5)
    with pytest.raises(ValueError, match="max_rollback >= 4") as refused_theirs:
        theirs.crop(-4)
    assert str(refused_ours.value) == str(refused_theirs.value)
    same_state()  # the refused crops changed nothing
    with pytest.raises(ValueError, match="negative"):
        theirs.crop(3)


def _sliding(arch="gemma2", **kwargs):
    """A tiny model whose sliding-window layers (4 tokens) alternate with full-attention ones (Gemma 2: soft-capping,
    so its own eager kernel), PSA applied."""
    return apply_psa(tiny_model(arch, sliding_window=4), kwargs.pop("variant", "symmetric"), 0.8, **kwargs)


def test_a_sliding_window_layer_keeps_its_window_only_and_decodes_as_the_full_forward(prompt):
    """Dropping the sheared keys that the sliding mask hides is exact: each k̂_j was written once, with its
    predecessor. After generating several windows, the sliding layers hold window - 1 keys, as transformers' own
    cache does, and the logits are the full forward's."""
    model, plain = _sliding(), tiny_model("gemma2", sliding_window=4)
    n, T = 12, prompt.shape[1]
    cache = PSADynamicCache(model.config)
    out = model.generate(prompt, max_new_tokens=n, do_sample=False, output_logits=True, return_dict_in_generate=True,
                         **cache_kw(cache))
    assert [(type(layer).__name__, layer.keys.shape[-2]) for layer in cache.layers] == [
        ("PSASlidingWindowLayer", 3), ("PSALayer", T + n - 1)]
    plain_cache = returned_cache(plain.generate(prompt, max_new_tokens=n, do_sample=False, return_dict_in_generate=True))
    assert cache.kv_bytes() == sum(layer.keys.nbytes + layer.values.nbytes for layer in plain_cache.layers)
    with torch.no_grad():
        full = model(out.sequences, use_cache=False).logits[:, T - 1 : -1]
    torch.testing.assert_close(torch.stack(out.logits, 1).double(), full, atol=2e-5, rtol=2e-6)
    assert torch.equal(out.sequences, _generate(model, prompt, max_new_tokens=n, use_cache=False))


@pytest.mark.parametrize("hooked", [False, True], ids=["cache-shears", "through-the-hook-points"])
def test_a_sliding_window_layer_decoded_by_hand_equals_the_full_forward(hooked):
    """A left-padded batch in chunks longer and shorter than the window, then one token a call: both paths, the
    cache shearing the keys it stores and the hook points' (the keys written back by ``store``), equal the
    full forward of each row, and keep the window only."""
    from psattn.ops.hooks import capture

    model = _sliding("mistral")
    ids = torch.randint(1, 60, (2, 16), generator=torch.Generator().manual_seed(8))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = PSADynamicCache(model.config)
    listening = capture(model, "model.layers.0.self_attn.hook_k") if hooked else contextlib.nullcontext()
    with torch.no_grad(), listening:
        steps = [model(ids[:, a:b], attention_mask=mask[:, :b], position_ids=positions[:, a:b], use_cache=True,
                       **cache_kw(cache)).logits for a, b in [(0, 7), (7, 9)] + [(t, t + 1) for t in range(9, 16)]]
        assert [layer.chunk_sheared for layer in cache.layers] == [not hooked, True]
        assert [tuple(layer.keys.shape) for layer in cache.layers] == [(2, 2, 3, 8)] * 2
        decoded = torch.cat(steps, 1)  # (2, 16, V)
        torch.testing.assert_close(decoded[:1], model(ids[:1], use_cache=False).logits, atol=1e-10, rtol=0)
        torch.testing.assert_close(decoded[1:, 5:], model(ids[1:, 5:], use_cache=False).logits, atol=1e-10, rtol=0)


def test_a_sliding_window_layer_is_cropped_within_what_it_keeps_and_refuses_a_deeper_crop(prompt):
    """Past the window, a crop needs the keys the window shows after it: held while transformers records the past
    (as before a generation that rolls back), or max_rollback more; otherwise refused, changing nothing."""
    model = _sliding("mistral")
    ids = torch.randint(1, 60, (1, 14), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = model(ids, use_cache=False).logits[:, 9:]
        for record, cache in ((False, PSADynamicCache(model.config)), (True, PSADynamicCache(model.config)),
                              (False, PSADynamicCache(model.config, max_rollback=3))):
            if record:
                cache.activate_past_recording()
            model(ids[:, :8], use_cache=True, **cache_kw(cache))
            model(ids[:, 8:12], use_cache=True, **cache_kw(cache))
            if not record and cache.layers[0].shear_state.max_rollback == 0:
                keys = cache.layers[0].keys
                with pytest.raises(ValueError, match="activate_past_recording"):
                    cache.crop(-3)
                assert cache.get_seq_length() == 12 and cache.layers[0].keys is keys  # the refused crop changed nothing
                continue
            cache.crop(-3)
            assert cache.get_seq_length() == 9 and all(layer.keys.shape[-2] <= 3 + 3 for layer in cache.layers)
            torch.testing.assert_close(model(ids[:, 9:], use_cache=True, **cache_kw(cache)).logits, expected,
                                       atol=1e-10, rtol=0)


@pytest.mark.parametrize("hooked", [False, True], ids=["cache-shears", "through-the-hook-points"])
def test_a_sliding_window_layer_holds_the_raw_rows_its_crops_need_not_the_prompts(hooked):
    """Past its window, a sliding-window layer can be cropped back max_rollback tokens only (a deeper crop needs keys
    it dropped), so right after a long prompt it holds the raw queries and keys of the last max_rollback + 1
    positions, not the prompt's: its memory is bounded by the window. The full-attention layer keeps the last call
    (any crop within it is exact). A crop within what is kept stays exact, a deeper one is refused, changing nothing."""
    from psattn.ops.hooks import capture

    model = apply_psa(tiny_model("gemma3_text", sliding_window=4, layer_types=["sliding_attention", "full_attention"]),
                      "symmetric", 0.8)
    ids = torch.randint(1, 60, (1, 124), generator=torch.Generator().manual_seed(5))
    cache = PSADynamicCache(model.config, max_rollback=2)
    listening = capture(model, "model.layers.0.self_attn.hook_k") if hooked else contextlib.nullcontext()
    with torch.no_grad(), listening:
        expected = model(ids, use_cache=False).logits[:, 118:]
        model(ids[:, :120], use_cache=True, **cache_kw(cache))
        assert [(layer.shear_state.raw_q.values.shape[-2], layer.shear_state.raw_k.values.shape[-2])
                for layer in cache.layers] == [(3, 3), (120, 120)]
        keys = cache.layers[0].keys
        with pytest.raises(ValueError, match="activate_past_recording"):
            cache.crop(-3)
        assert cache.get_seq_length() == 120 and cache.layers[0].keys is keys  # the refused crop changed nothing
        cache.crop(-2)
        decoded = torch.cat([model(ids[:, 118:120], use_cache=True, **cache_kw(cache)).logits]
                            + [model(ids[:, t : t + 1], use_cache=True, **cache_kw(cache)).logits for t in range(120, 124)], 1)
    torch.testing.assert_close(decoded, expected, atol=1e-10, rtol=0)
    assert [layer.shear_state.raw_k.values.shape[-2] for layer in cache.layers] == [3, 3]  # max_rollback + 1 each


def _compiled(model):
    """``model`` compiled whole by Dynamo (backend "eager": its tracing of the PSA hooks and cache is the path under
    test; inductor's code generation adds nothing to it and takes a minute on a CPU)."""
    torch._dynamo.reset()
    return torch.compile(model, fullgraph=True, backend="eager")


@pytest.mark.parametrize("own_cache", [False, True, "compiled"],
                         ids=["generate's-cache", "PSADynamicCache", "a-compiled-forward's-cache"])
def test_a_crop_one_layer_refuses_changes_no_layer(own_cache):
    """A full-attention layer before a sliding-window one (Qwen2's max_window_layers puts them so) can go back
    further than the sliding one: the cache checks every layer before it crops any, so the refused crop leaves
    every layer as it was, and decoding on from there equals the full forward. The same holds for the cache a
    compiled forward makes for itself, which stays a plain DynamicCache (Dynamo cannot change its class)."""
    model = apply_psa(tiny_model("gemma3_text", sliding_window=4, layer_types=["full_attention", "sliding_attention"]),
                      "symmetric", 0.8)
    ids = torch.randint(1, 60, (1, 20), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        if own_cache == "compiled":
            forward = _compiled(model)
            cache = returned_cache(forward(ids[:, :12], use_cache=True))
            forward(ids[:, 12:16], use_cache=True, **cache_kw(cache))
            assert type(cache).__name__ == "DynamicCache"
            assert pickle.loads(pickle.dumps(cache)).get_seq_length() == 16  # its layers' weak references are not kept
            copied = copy.deepcopy(cache)  # a copy's layers check the copy's
            with pytest.raises(ValueError, match="sliding-window layer"):
                copied.crop(-3)
            assert [layer.get_seq_length() for layer in copied.layers] == [16, 16]
        elif own_cache:
            cache = PSADynamicCache(model.config)
            model(ids[:, :12], use_cache=True, **cache_kw(cache))
            model(ids[:, 12:16], use_cache=True, **cache_kw(cache))
        else:  # the DynamicCache the model makes for itself, as generate's
            cache = returned_cache(model(ids[:, :12], use_cache=True))
            model(ids[:, 12:16], use_cache=True, **cache_kw(cache))
        held = [(layer.get_seq_length(), layer.keys) for layer in cache.layers]
        with pytest.raises(ValueError, match="sliding-window layer"):
            cache.crop(-3)
        assert [layer.get_seq_length() for layer in cache.layers] == [n for n, _ in held] == [16, 16]
        assert all(layer.keys is keys for layer, (_, keys) in zip(cache.layers, held, strict=True))
        decoded = torch.cat([model(ids[:, t : t + 1], use_cache=True, **cache_kw(cache)).logits for t in range(16, 20)], 1)
    torch.testing.assert_close(decoded, model(ids, use_cache=False).logits[:, 16:], atol=1e-10, rtol=0)


def test_assisted_decoding_and_beam_search_on_sliding_window_layers_equal_greedy(prompt, monkeypatch):
    """transformers records the past before assisted decoding, so the target's sliding-window layers are cropped
    back several tokens past the window; beam search reorders them."""
    target = _sliding("mistral")
    assistant = tiny_model("mistral", seed=1, sliding_window=4)
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    assistant.generation_config.num_assistant_tokens = 4
    assistant.generation_config.assistant_confidence_threshold = 0.0
    greedy = _generate(target, prompt, max_new_tokens=12)
    removed = []
    crop = PSASlidingWindowLayer.crop
    monkeypatch.setattr(PSASlidingWindowLayer, "crop", lambda layer, n: (removed.append(-n), crop(layer, n))[1])
    assert torch.equal(_generate(target, prompt, max_new_tokens=12, assistant_model=assistant), greedy)
    assert max(removed) >= 2
    kwargs = dict(max_new_tokens=8, num_beams=3, num_return_sequences=2)
    assert torch.equal(_generate(target, prompt, **kwargs), _generate(target, prompt, use_cache=False, **kwargs))


@pytest.mark.slow  # torch.compile of three forward passes
def test_a_patched_model_compiles_and_gives_its_eager_logits_without_and_with_a_cache():
    """``torch.compile(model)`` of a patched model: the pre-hook and the cache run traced (Dynamo, then AOTAutograd's
    functionalization: backend "aot_eager"; inductor's code generation, a minute on a cold cache, is PyTorch's and
    the trainer's compile test runs it on a PSA model), and the logits are the eager ones (transformers' RoPE, float64)."""
    model = apply_psa(tiny_model(), "symmetric", 0.8)
    compiled = torch.compile(model, backend="aot_eager")
    ids = torch.randint(1, 50, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids, use_cache=False).logits, model(ids, use_cache=False).logits,
                                   atol=1e-5, rtol=0)
        steps = []
        for forward in (model, compiled):
            cache = returned_cache(forward(ids[:, :6], use_cache=True))
            steps.append(forward(ids[:, 6:7], **cache_kw(cache), use_cache=True).logits)
    torch.testing.assert_close(steps[1], steps[0], atol=1e-5, rtol=0)


@pytest.mark.slow  # torch.compile (Dynamo alone, backend "eager") of a prefill and three decode steps: about 10 s
def test_a_patched_model_compiles_into_as_many_graphs_as_the_plain_one():
    """PSA adds no graph break and no recompilation under ``torch.compile``: a ``functools.cached_property`` on
    the PSA settings broke the graph at every layer on Python 3.11, and a raw window that grew a list of rows
    would have compiled the second decode step anew."""
    from torch._dynamo.utils import counters

    ids = torch.randint(1, 50, (2, 9), generator=torch.Generator().manual_seed(0))
    seen = {}
    for name, model in (("plain", tiny_model()), ("psa", apply_psa(tiny_model(), "symmetric", 0.8))):
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(model, backend="eager")
        with torch.no_grad():
            cache = returned_cache(compiled(ids[:, :6], use_cache=True))
            for t in range(6, 9):
                compiled(ids[:, t : t + 1], **cache_kw(cache), use_cache=True)
        seen[name] = (counters["stats"]["unique_graphs"], sum(counters["graph_break"].values()))
    assert seen["psa"] == seen["plain"] and seen["plain"][1] == 0, seen
