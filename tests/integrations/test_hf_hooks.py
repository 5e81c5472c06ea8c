"""One hook vocabulary: the same patch gives the same logits in psattn's DecoderLM and in a
transformers Llama patched by apply_psa that computes the same function."""

import pytest
import torch

pytest.importorskip("transformers")

from psattn.integrations.hf import apply_psa  # noqa: E402
from psattn.models.config import AttentionConfig, ModelConfig  # noqa: E402
from psattn.models.decoder import DecoderLM  # noqa: E402
from psattn.ops.hooks import HOOK_NAMES, patch  # noqa: E402

VOCAB, D, LAYERS = 32, 32, 2


def twins():
    """A DecoderLM (RMSNorm, attention-only blocks, untied embeddings) and a Llama with the same weights
    (its MLPs zeroed), both under symmetric PSA at gamma 0.8, in float64."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    ours = DecoderLM(ModelConfig(vocab_size=VOCAB, d_model=D, n_layers=LAYERS, n_heads=4, n_kv_heads=2, mlp=False,
                                 norm="rmsnorm", tie_embeddings=False, attention=AttentionConfig("symmetric", 0.8)))
    ours = ours.double().eval()
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=8, num_hidden_layers=LAYERS,
                         num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=torch.finfo(torch.float64).eps,
                         rope_theta=10000.0, tie_word_embeddings=False)
    theirs = LlamaForCausalLM(config).double().eval()
    with torch.no_grad():
        theirs.model.embed_tokens.weight.copy_(ours.embed.weight)
        for block, layer in zip(ours.blocks, theirs.model.layers, strict=True):
            layer.input_layernorm.weight.copy_(block.norm_attn.weight)
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(layer.self_attn, name).weight.copy_(getattr(block.attn, name).weight)
            layer.mlp.down_proj.weight.zero_()  # no MLP, as in the attention-only DecoderLM
        theirs.model.norm.weight.copy_(ours.norm_final.weight)
        theirs.lm_head.weight.copy_(ours.lm_head.weight)
    return ours, apply_psa(theirs, "symmetric", 0.8)


def logits(model, ids):
    with torch.no_grad():
        out = model(ids) if isinstance(model, DecoderLM) else model(ids, use_cache=False).logits
    return out


EDITS = {  # one patch per hook point that can be patched (score terms are read-only)
    "hook_q": lambda x: x.flip(-2),
    "hook_k": lambda x: 2 * x,
    "hook_q_sheared": lambda x: -x,
    "hook_k_sheared": lambda x: x.roll(1, dims=-1),
    "hook_v": lambda x: x.cumsum(-2),
    "hook_pattern": lambda p: p.tril() / p.tril().sum(-1, keepdim=True).clamp(min=1e-30) * 0.5,
    "hook_out": lambda x: 3 * x,
}
assert set(EDITS) == set(HOOK_NAMES) - {"hook_score_terms"}


@pytest.mark.parametrize("point", sorted(EDITS))
def test_the_same_patch_gives_the_same_logits_in_both_worlds(point):
    ours, theirs = twins()
    ids = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    before = logits(ours, ids)
    torch.testing.assert_close(logits(theirs, ids), before, atol=1e-5, rtol=0)
    with patch(ours, {f"blocks.1.attn.{point}": EDITS[point]}):
        patched = logits(ours, ids)
    with patch(theirs, {f"model.layers.1.self_attn.{point}": EDITS[point]}):
        torch.testing.assert_close(logits(theirs, ids), patched, atol=1e-5, rtol=0)
    assert (patched - before).abs().max() > 1e-3  # the patch changed the logits


def decoded(model, ids):
    """Logits of a prefill of all but the last two tokens, then two one-token steps, with a cache."""
    from integrations.hf_tiny import cache_kw
    from psattn.integrations.hf import PSADynamicCache

    chunks = (ids[:, :-2], ids[:, -2:-1], ids[:, -1:])
    with torch.no_grad():
        if isinstance(model, DecoderLM):
            cache = model.new_cache()
            return torch.cat([model(chunk, cache=cache) for chunk in chunks], 1)
        cache = PSADynamicCache(model.config)
        return torch.cat([model(chunk, **cache_kw(cache), use_cache=True).logits for chunk in chunks], 1)


@pytest.mark.parametrize("point", sorted(EDITS))
def test_the_same_patch_gives_the_same_logits_in_both_worlds_with_a_cache(point):
    """With a cache the hook points see the chunk of each call in both worlds (the pattern: the chunk's
    queries against every key), and a replacement is what each cache keeps."""
    ours, theirs = twins()
    ids = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(2))
    with patch(ours, {f"blocks.*.attn.{point}": EDITS[point]}):
        patched = decoded(ours, ids)
    with patch(theirs, {f"model.layers.*.self_attn.{point}": EDITS[point]}):
        torch.testing.assert_close(decoded(theirs, ids), patched, atol=1e-5, rtol=0)
    assert (patched - decoded(ours, ids)).abs().max() > 1e-3  # the patch changed the logits, and is gone


def test_a_crop_then_the_same_continuation_gives_the_same_logits_in_both_worlds():
    """One crop rule: each world decodes, rolls its cache back three tokens (the library's length,
    transformers' number of tokens to remove) and continues with other tokens; both give the logits of
    the full forward of what is left."""
    from integrations.hf_tiny import cache_kw
    from psattn.integrations.hf import PSADynamicCache

    ours, theirs = twins()
    ids = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(3))
    other = torch.randint(0, VOCAB, (1, 3), generator=torch.Generator().manual_seed(4))
    kept = torch.cat([ids[:, :6], other], 1)
    with torch.no_grad():
        cache = ours.new_cache(max_rollback=3)
        for t in range(9):
            ours(ids[:, t : t + 1], cache=cache)
        cache.crop(6)
        mine = ours(other, cache=cache)
        hf_cache = PSADynamicCache(theirs.config, max_rollback=3, keep_last_call=False)
        for t in range(9):
            theirs(ids[:, t : t + 1], **cache_kw(hf_cache), use_cache=True)
        hf_cache.crop(-3)
        their = theirs(other, **cache_kw(hf_cache), use_cache=True).logits
    torch.testing.assert_close(mine, logits(ours, kept)[:, 6:], atol=1e-10, rtol=0)
    torch.testing.assert_close(their, mine, atol=1e-5, rtol=0)


def test_a_replacement_at_the_read_only_score_terms_is_refused_in_a_patched_model():
    """As in psattn's own layer: new terms returned at hook_score_terms were dropped without a word."""
    _, theirs = twins()
    ids = torch.randint(0, VOCAB, (1, 5))
    with pytest.raises(ValueError, match=r"hook_score_terms is read-only"):
        with patch(theirs, {"model.layers.0.self_attn.hook_score_terms": lambda terms: type(terms)(*(t * 0 for t in terms))}):
            logits(theirs, ids)
