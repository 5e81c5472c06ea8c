"""apply_psa finds the attention modules by a dry run of the model and refuses, in one line, what differs."""

import pytest
import torch

pytest.importorskip("transformers")

from integrations.hf_tiny import tiny_config, tiny_model  # noqa: E402
from psattn.integrations.hf import apply_psa, psa_spec  # noqa: E402
from psattn.integrations.hf.detect import find_attention  # noqa: E402


def refusal(model) -> str:
    """The one-line reason apply_psa gives; the model is left as it was."""
    config, implementation = model.config, model.config._attn_implementation
    with pytest.raises(NotImplementedError) as err:
        apply_psa(model)
    message = str(err.value)
    assert "\n" not in message
    assert psa_spec(model) is None and model.config is config and config._attn_implementation == implementation
    return message


def test_the_pattern_is_found_in_every_layer():
    model = tiny_model("smollm3")  # the second layer has no RoPE (NoPE)
    pattern = find_attention(model, "sdpa")
    assert pattern.modules == [layer.self_attn for layer in model.model.layers]
    assert pattern.rotary_channels == {0: 8} and pattern.head_dim == {0: 8, 1: 8}
    assert "1 without RoPE" in pattern.describe()


def test_a_model_without_rotary_embeddings_is_refused():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=61, n_embd=32, n_layer=1, n_head=2, n_positions=64)).eval()
    assert "GPT2Attention applies no rotary position embeddings" in refusal(gpt2)


def test_a_model_that_attends_with_its_own_code_is_refused():
    from transformers import BloomConfig, BloomForCausalLM

    bloom = BloomForCausalLM(BloomConfig(vocab_size=61, hidden_size=32, n_layer=1, n_head=2)).eval()
    assert "calls no registered transformers attention function" in refusal(bloom)


def _rope_after_update(model):
    """Make every attention module cache its keys before RoPE (a model PSA cannot patch exactly)."""
    from transformers.models.llama import modeling_llama as llama

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        q, k, v = (p(hidden_states).view(shape).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        q, k = llama.apply_rotary_pos_emb(q, k, *position_embeddings)
        out, weights = llama.ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, None)(
            self, q, k, v, attention_mask, scaling=self.scaling, **kwargs)
        return self.o_proj(out.reshape(*hidden_states.shape[:-1], -1)), weights

    for layer in model.model.layers:
        layer.self_attn.forward = forward.__get__(layer.self_attn)
    return model


def test_a_module_that_caches_keys_before_rope_is_refused():
    message = refusal(_rope_after_update(tiny_model("llama")))
    assert "LlamaAttention" in message and "rotary embeddings after past_key_values.update" in message


def test_a_model_on_the_meta_device_is_refused():
    with torch.device("meta"):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_config(tiny_config("llama"))
    with pytest.raises(NotImplementedError, match="meta device"):
        apply_psa(model)


def test_the_dry_run_leaves_no_trace():
    from transformers.models.llama import modeling_llama as llama

    rope = llama.apply_rotary_pos_emb
    model = tiny_model("llama").train()
    model.model.layers[1].eval()
    torch.manual_seed(5)
    state = torch.random.get_rng_state()
    apply_psa(model)
    assert torch.equal(torch.random.get_rng_state(), state)  # no random numbers drawn
    assert model.training and not model.model.layers[1].training and model.model.layers[0].training
    assert llama.apply_rotary_pos_emb is rope


def test_partial_rotary_is_measured_on_the_channels_that_turn():
    from psattn.integrations.hf.support import tiny_model as any_tiny_model

    for model_type, turned in (("phi", 4), ("stablelm", 2), ("glm", 4), ("gptj", 4), ("llama", 8)):
        pattern = find_attention(any_tiny_model(model_type), "sdpa")
        assert pattern.rotary_channels == {0: turned, 1: turned} and pattern.head_dim == {0: 8, 1: 8}, model_type
        assert ("partial rotary" in pattern.describe()) == (turned < 8)
    assert "4 of 8 channels turn; the shear acts on all channels" in find_attention(any_tiny_model("phi"), "sdpa").describe()


def test_multi_latent_attention_is_refused_with_the_reason():
    from psattn.integrations.hf.support import tiny_model as any_tiny_model

    message = refusal(any_tiny_model("deepseek_v3"))
    assert "DeepseekV3Attention" in message and "multi-latent attention" in message


def test_a_rotary_call_of_a_submodule_after_the_update_is_not_the_attention_caching_keys_before_rope():
    """DeepSeek-V3.2's attention turns its keys before the cache update; its indexer submodule turns its own keys after
    it. The dry run said the attention cached keys before RoPE; the reason is its multi-latent attention."""
    from psattn.integrations.hf.support import tiny_model as any_tiny_model

    message = refusal(any_tiny_model("deepseek_v32"))
    assert "DeepseekV32Attention" in message and "multi-latent attention" in message


def test_a_model_that_keeps_its_attention_implementation_is_refused_by_the_dry_run():
    """GOT-OCR2 passed the dry run (so docs/hf_support.md would list it supported); apply_psa then refused it, as the
    model keeps its attention implementation when set_attn_implementation switches to PSA's."""
    from psattn.integrations.hf.support import tiny_model as any_tiny_model

    with pytest.raises(NotImplementedError, match="keeps its attention implementation"):
        find_attention(any_tiny_model("got_ocr2"), "eager")


def test_a_module_that_runs_once_per_loop_on_another_cache_layer_is_refused():
    """Dory's recurrent block runs twice per forward, each loop on its own cache layer: the dry run checked the first
    call only and passed, and the patched model's cached generation raised."""
    from psattn.integrations.hf.support import tiny_model as any_tiny_model

    message = refusal(any_tiny_model("dory"))
    assert "DoryAttention runs more than once in one forward pass, on cache layers [1, 3]" in message


def test_a_model_whose_cache_layers_hold_linear_attention_state_beside_the_keys_is_refused():
    """Falcon-H1 passed the dry run, then its every cached forward (the default, and generate) raised."""
    from psattn.integrations.hf.support import tiny_model as any_tiny_model

    message = refusal(any_tiny_model("falcon_h1"))
    assert "FalconH1Attention" in message and "LinearAttentionAndFullAttentionLayer" in message


def test_a_model_whose_input_embeddings_are_a_list_is_refused_with_the_reason():
    """MusicGen's causal LM embeds each codebook with its own table (a ModuleList, no .weight): the dry run
    raised AttributeError building its input instead of refusing the model (no RoPE) in one line."""
    import transformers

    decoder = transformers.MusicgenDecoderConfig(vocab_size=16, hidden_size=16, ffn_dim=16, num_hidden_layers=1,
                                                 num_attention_heads=2, num_codebooks=1, pad_token_id=15, bos_token_id=15)
    model = transformers.MusicgenForCausalLM(decoder).eval()
    with pytest.raises(NotImplementedError, match="MusicgenAttention applies no rotary position embeddings"):
        apply_psa(model, "key_only", 0.5)


@pytest.mark.parametrize("model_type", ["gemma3n_text", "gemma4_text"])
def test_layers_that_attend_with_another_layers_cached_keys_are_refused(model_type):
    """Gemma 3n (its configs share the last 15 layers by default) and Gemma 4 with ``num_kv_shared_layers`` > 0: the
    last layers attend with the keys and values an earlier layer cached, and update no cache layer of their own. The
    tiny configs of ``support.TINY`` share none."""
    layers = dict(num_hidden_layers=4, num_kv_shared_layers=2, layer_types=["sliding_attention", "full_attention"] * 2)
    if model_type == "gemma3n_text":
        layers.update(activation_sparsity_pattern=[0.0] * 4, intermediate_size=[48] * 4)
    assert "attends without calling past_key_values.update first" in refusal(tiny_model(model_type, **layers))
