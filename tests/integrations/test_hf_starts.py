"""Sequence starts of a chunk as a patched transformers model reads them, worked out once per forward pass,
and the decode path where the cache shears the keys it stores."""

import contextlib
import copy
import gc
import pickle
import weakref

import pytest
import torch

pytest.importorskip("transformers")

from integrations.hf_tiny import cache_kw, returned_cache, tiny_model  # noqa: E402
from psattn.integrations.hf import PSADynamicCache, apply_psa  # noqa: E402
from psattn.integrations.hf import starts as starts_module  # noqa: E402
from psattn.integrations.hf.cache import PSALayer  # noqa: E402
from psattn.integrations.hf.starts import StartsMemo, chunk_starts  # noqa: E402
from psattn.ops.hooks import capture  # noqa: E402

CPU = torch.device("cpu")


def test_chunk_starts_reads_the_first_token_the_positions_and_the_padding():
    assert chunk_starts(2, 3, 0, None, None, CPU).tolist() == [[True, False, False]] * 2
    assert not chunk_starts(2, 3, 5, None, None, CPU).any()  # a chunk after cached tokens
    restart = torch.tensor([[4, 0, 1]])  # a packed document starts at the second token
    assert chunk_starts(1, 3, 5, restart, None, CPU).tolist() == [[False, True, False]]
    real = torch.tensor([[False, True, True], [True, True, True]])  # the first row is left-padded
    mask = (real[:, None, None, :] & torch.ones(3, 3, dtype=torch.bool).tril())  # (B, 1, T, T), True = attend
    assert chunk_starts(2, 3, 0, None, mask, CPU).tolist() == [[True, True, False], [True, False, False]]
    additive = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    assert torch.equal(chunk_starts(2, 3, 0, None, additive, CPU), chunk_starts(2, 3, 0, None, mask, CPU))


def test_the_memo_recomputes_for_other_or_changed_inputs_only(monkeypatch):
    calls = []
    monkeypatch.setattr(starts_module, "chunk_starts", lambda *a: calls.append(a) or torch.tensor([[True, False]]))
    memo = StartsMemo()
    positions = torch.tensor([[0, 1]])
    first = memo.starts(1, 2, 0, positions, None, CPU)
    assert memo.starts(1, 2, 0, positions, None, CPU) is first and len(calls) == 1  # the next layer
    memo.starts(1, 2, 0, positions.clone(), None, CPU)  # equal values, another tensor
    assert len(calls) == 2
    memo.starts(1, 2, 3, positions, None, CPU)  # another past length
    assert len(calls) == 3
    memo.starts(1, 2, 3, positions, None, CPU)
    assert len(calls) == 3
    positions[0, 0] = 7  # changed in place: its version counter moved
    memo.starts(1, 2, 3, positions, None, CPU)
    assert len(calls) == 4
    mask = torch.ones(1, 1, 2, 5, dtype=torch.bool)  # layers of another attention type, in the same pass
    for _ in range(2):
        memo.starts(1, 2, 3, positions, mask, CPU)
        memo.starts(1, 2, 3, positions, None, CPU)
    assert len(calls) == 5


def test_a_decode_step_with_no_start_gets_none_on_any_device(monkeypatch):
    """On a GPU too the shear of a decode step takes its one-lerp path: its starts are read (one wait for the
    device a forward pass), not handed on as a tensor of False to select with in every layer."""
    monkeypatch.setattr(starts_module, "chunk_starts", lambda *a: torch.zeros(1, 1, dtype=torch.bool))
    assert StartsMemo().starts(1, 1, 5, torch.tensor([[5]]), None, torch.device("cuda")) is None
    monkeypatch.setattr(starts_module, "chunk_starts", lambda *a: torch.ones(1, 1, dtype=torch.bool))
    assert StartsMemo().starts(1, 1, 5, torch.tensor([[0]]), None, torch.device("cuda")).tolist() == [[True]]


def test_the_memo_gives_none_where_no_token_starts_a_sequence_and_keeps_no_mask_alive():
    memo = StartsMemo()
    mask = torch.ones(1, 1, 1, 6, dtype=torch.bool)  # one decoded token that sees five cached ones
    assert memo.starts(1, 1, 5, torch.tensor([[5]]), mask, CPU) is None
    assert memo.starts(1, 1, 5, torch.tensor([[0]]), None, CPU).tolist() == [[True]]  # a restart
    seen = weakref.ref(mask)
    del mask
    gc.collect()
    assert seen() is None
    for twin in (copy.deepcopy(memo), pickle.loads(pickle.dumps(memo))):  # a copied model starts afresh
        assert twin._seen == {}


def test_a_forward_pass_works_out_the_starts_once_for_all_layers(monkeypatch):
    model = apply_psa(tiny_model("llama", num_hidden_layers=3), "symmetric", 0.8)
    calls = []
    original = starts_module.chunk_starts
    monkeypatch.setattr(starts_module, "chunk_starts", lambda *a: calls.append(a) or original(*a))
    ids = torch.randint(1, 50, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(ids[:, :5], use_cache=True)
        model(ids[:, 5:], **cache_kw(returned_cache(out)), use_cache=True)
    assert len(calls) == 2  # one per forward pass, not one per layer


def test_without_a_listened_hook_point_the_cache_stores_the_sheared_keys_itself():
    """The decode path without hooks (the cache shears and stores k̂ in ``update``) keeps the same cache and
    gives the same logits as the path through the hook points (taken when a hook listens)."""
    model = apply_psa(tiny_model("llama", num_hidden_layers=2), "symmetric", 0.8)
    ids = torch.randint(1, 50, (2, 7), generator=torch.Generator().manual_seed(1))

    def decode(hooked: bool):
        cache = PSADynamicCache(model.config)
        logits, paths = [], []
        listening = capture(model, "model.layers.1.self_attn.hook_k") if hooked else contextlib.nullcontext()
        with torch.no_grad(), listening:
            for chunk in (ids[:, :5], ids[:, 5:6], ids[:, 6:]):
                logits.append(model(chunk, **cache_kw(cache), use_cache=True).logits)
                paths.append([layer.chunk_sheared for layer in cache.layers if isinstance(layer, PSALayer)])
        return torch.cat(logits, 1), cache, paths

    quiet, quiet_cache, quiet_paths = decode(False)
    heard, heard_cache, heard_paths = decode(True)
    assert quiet_paths == [[True, True]] * 3 and heard_paths == [[True, False]] * 3
    assert torch.equal(quiet, heard)
    for a, b in zip(quiet_cache.layers, heard_cache.layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
    torch.testing.assert_close(quiet, full, atol=1e-10, rtol=0)


def test_under_inference_mode_a_changed_position_tensor_is_read_afresh_in_the_next_forward_pass():
    """Inference tensors keep no version counter; the memo is forgotten at the start of every forward pass."""
    model = apply_psa(tiny_model("llama"), "symmetric", 0.8)
    ids = torch.randint(1, 50, (1, 6), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        positions = torch.arange(6)[None]
        first = model(ids, position_ids=positions, use_cache=False).logits
        positions[0, 3:] = torch.arange(3)  # in place: a second document starts at the fourth token
        packed = model(ids, position_ids=positions, use_cache=False).logits
        fresh = model(ids, position_ids=positions.clone(), use_cache=False).logits
    assert torch.equal(packed, fresh) and not torch.allclose(packed, first)




def test_llama4s_chunked_attention_layers_start_a_sequence_at_every_chunk():
    """A chunked layer's mask hides the key before each chunk from the chunk's first token, as a packed document's
    block mask does: with the replicate rule that token's key is left unsheared, every other one is sheared."""
    from psattn.ops.shear import shear

    model = apply_psa(tiny_model("llama4_text", attention_chunk_size=4), "key_only", 0.8)
    ids = torch.randint(1, 50, (1, 10), generator=torch.Generator().manual_seed(0))
    with capture(model, "*.hook_k", "*.hook_k_sheared") as seen, torch.no_grad():
        model(ids, use_cache=False)
    starts = torch.zeros(1, 10, dtype=torch.bool)
    starts[0, [0, 4, 8]] = True
    for layer in ("model.layers.0.self_attn", "model.layers.1.self_attn"):
        k = seen[f"{layer}.hook_k"]
        torch.testing.assert_close(seen[f"{layer}.hook_k_sheared"], shear(k, 0.8, starts=starts), rtol=0, atol=1e-12)


def test_a_4d_integer_mask_is_refused_naming_its_dtype():
    """A 4D mask of integers (which neither SDPA nor eager attention takes) failed in torch.finfo with "requires a
    floating point input type"; it is refused naming the mask and what it takes. Bool and additive float pass."""
    model = apply_psa(tiny_model("llama"), "key_only", 0.8)
    ids = torch.tensor([[5, 6, 7, 8]])
    causal = torch.ones(4, 4, dtype=torch.bool).tril()[None, None]  # (1, 1, T, T)
    with pytest.raises(TypeError, match=r"^a 4D attention_mask must be bool \(True = attend\) or additive float, got "
                                        r"torch.int64$"), torch.no_grad():
        model(ids, attention_mask=causal.long())
    additive = torch.zeros(1, 1, 4, 4, dtype=torch.float64).masked_fill(~causal, torch.finfo(torch.float64).min)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, attention_mask=additive).logits, model(ids, attention_mask=causal).logits)


@pytest.mark.parametrize("value", [0.5, -1.0, 2.0])
def test_generate_refuses_a_mask_it_would_count_positions_from_wrongly(value):
    """transformers attends wherever generate's attention_mask is not 0 but counts positions with
    ``mask.long().cumsum(-1)``: a 0.5 (or -1) on the first real token of a left-padded row gave the next one position 0,
    a sequence start to PSA while the attention still saw the token before it; generate went on without a word. It is
    refused before any forward pass; a float mask of 0 and 1 generates what the integer one does."""
    model = apply_psa(tiny_model("llama"), "key_only", 0.8)
    ids = torch.tensor([[0, 0, 7, 8, 9], [3, 4, 5, 6, 7]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    embedded = []
    model.model.embed_tokens.register_forward_pre_hook(lambda *args: embedded.append(1))
    odd = mask.double()
    odd[0, 2] = value
    with pytest.raises(ValueError, match=rf"^attention_mask must hold 1 at real tokens and 0 at padding, got {value:g}$"), \
            torch.no_grad():
        model.generate(ids, attention_mask=odd if value != 2.0 else odd.long(), max_new_tokens=2, do_sample=False)
    assert not embedded
    with torch.no_grad():
        tokens = [model.generate(ids, attention_mask=m, max_new_tokens=3, do_sample=False) for m in (mask, mask.float())]
    assert torch.equal(*tokens)
