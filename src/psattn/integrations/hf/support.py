"""The model types the transformers integration is tested on, and the tiny random configs it tests them with.

``TINY`` maps each tested model type to the settings (beyond ``TINY_COMMON``) of a 2-layer random model
small enough to run in milliseconds; ``tests/integrations`` checks every guarantee of ``apply_psa`` on
each of them. ``tiny_config`` builds one (offline: no weights are downloaded).
"""

from __future__ import annotations

VOCAB = 61
PAD = 0

# Small enough to run in milliseconds, with weights large enough (initializer_range) that outputs
# depend strongly on the input.
TINY_COMMON = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    max_position_embeddings=256, pad_token_id=PAD, bos_token_id=None, eos_token_id=None,
    initializer_range=0.25, tie_word_embeddings=False,
)

TINY: dict[str, dict] = {
    "llama": {},
    "qwen2": {},
    "qwen3": dict(head_dim=8),
    # A sliding window shorter than the test sequences exercises the sliding mask and the cache
    # conversion of sliding layers.
    "mistral": dict(sliding_window=6),
    # no_rope_layer_interval=2: the second layer has no RoPE at all (NoPE).
    "smollm3": dict(no_rope_layer_interval=2),
    "mixtral": dict(num_local_experts=2, num_experts_per_tok=1),
    "qwen2_moe": dict(
        num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16, shared_expert_intermediate_size=16
    ),
    "qwen3_moe": dict(num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16, head_dim=8),
    "olmo2": {},
    # Llama's attention code path (q, k, v projections, RoPE, update, attention), copied into each family.
    "gemma": dict(head_dim=8),  # embeddings scaled by sqrt(hidden_size), GeLU MLP
    "granite": dict(head_dim=8),  # attention_multiplier as the scaling, residual and logit multipliers
    "granitemoe": dict(head_dim=8, num_local_experts=2, num_experts_per_tok=1),
    "granitemoeshared": dict(head_dim=8, num_local_experts=2, num_experts_per_tok=1),
    "helium": dict(head_dim=8),
    "starcoder2": dict(head_dim=8),  # biases, LayerNorm, sliding window off by default
    "olmo": dict(head_dim=8),  # LayerNorm without parameters, q/k/v clipping
    "olmoe": dict(head_dim=8, num_experts=2, num_experts_per_tok=1),
    "flex_olmo": dict(head_dim=8, num_experts=2, num_experts_per_tok=1),
    "olmo3": dict(head_dim=8),  # QK-norm before RoPE, sliding-window layers
    "glm": dict(head_dim=8),  # interleaved rotary on half of the channels
    "glm4": dict(head_dim=8),
    "ministral": dict(head_dim=8),
    "ministral3": dict(head_dim=8),
    "nemotron": dict(head_dim=8),  # partial rotary, LayerNorm1P, squared-ReLU MLP
    "exaone": dict(head_dim=8),
    "exaone4": dict(head_dim=8),  # QK-norm, sliding-window layers
    "ernie4_5": dict(head_dim=8),
    "apertus": dict(head_dim=8),  # QK-norm, xIELU MLP
    "arcee": dict(head_dim=8),
    "bitnet": dict(head_dim=8),
    "seed_oss": dict(head_dim=8),
    "hunyuan_v1_dense": dict(head_dim=8),  # QK-norm after RoPE
    "mellum": dict(head_dim=8),
    "nanochat": dict(head_dim=8),
    "hyperclovax": dict(head_dim=8),
    "jais2": dict(head_dim=8),
    "solar_open": dict(head_dim=8),
    "llama4_text": dict(head_dim=8),  # chunked attention, QK L2-norm
    "gemma3_text": dict(head_dim=8),  # QK-norm, sliding-window layers, a local RoPE base
    # AltUp, LAuReL and per-layer input embeddings; no KV-shared layers (those are refused: their default is 15)
    "gemma3n_text": dict(head_dim=8, vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=8,
                         num_kv_shared_layers=0, layer_types=["sliding_attention", "full_attention"], sliding_window=6,
                         laurel_rank=4, altup_num_inputs=2, activation_sparsity_pattern=[0.0, 0.0],
                         intermediate_size=[48, 48]),
    # Multimodal models on text alone: the language model's settings in text_config, a one-layer vision tower.
    "gemma3": dict(text_config=dict(head_dim=8), mm_tokens_per_image=4, image_token_id=60, boi_token_index=58,
                   eoi_token_index=59, vision_config=dict(hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                                                          num_attention_heads=2, image_size=8, patch_size=4)),
    "gemma4": dict(text_config=dict(head_dim=8, global_head_dim=8, vocab_size_per_layer_input=VOCAB,
                                    hidden_size_per_layer_input=8, layer_types=["sliding_attention", "full_attention"],
                                    sliding_window=6)),
    "llama4": dict(text_config=dict(head_dim=8), vision_config=dict(
        hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, image_size=8, patch_size=4,
        vision_output_dim=16, projector_input_dim=16, projector_output_dim=16)),
    "qwen3_5": dict(text_config=dict(head_dim=8, num_hidden_layers=4), vision_config=dict(
        depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=32)),
    # per-layer input embeddings, proportional RoPE on a quarter of the global layers' channels
    "gemma4_text": dict(head_dim=8, global_head_dim=8, vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=8,
                        layer_types=["sliding_attention", "full_attention"], sliding_window=6),
    # Partial rotary: only the first r channels of each head turn; the shear acts on all of them.
    "phi": dict(head_dim=8),
    "persimmon": dict(head_dim=8),
    "stablelm": dict(head_dim=8),
    # Fused QKV projections.
    "phi3": dict(head_dim=8),
    "gpt_neox": dict(head_dim=8),
    # q, k, v clipping; attn_config as DBRX's checkpoints give it (transformers reads rope_theta from it)
    "dbrx": dict(d_model=32, n_heads=4, n_layers=2, attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=8.0),
                 ffn_config=dict(ffn_hidden_size=48, moe_num_experts=2, moe_top_k=1)),
    "phimoe": dict(head_dim=8, num_local_experts=2, num_experts_per_tok=1),
    # Parallel attention and MLP, interleaved rotary, logit scale.
    "cohere": dict(head_dim=8),
    "cohere2": dict(head_dim=8),
    "falcon": dict(new_decoder_architecture=True, num_kv_heads=2, alibi=False),  # parallel blocks, fused QKV
    "gptj": dict(rotary_dim=4, n_positions=256),  # parallel blocks, interleaved partial rotary
    "codegen": dict(rotary_dim=4, n_positions=256),
    # More copies of Llama's attention path (dense and MoE), as the dry run finds them.
    "afmoe": dict(head_dim=8),
    "apertus1p5_text": dict(head_dim=8),
    "aria_text": dict(head_dim=8),
    "beam": dict(head_dim=8),
    "cohere2_moe": dict(head_dim=8),
    "ergo": dict(head_dim=8, num_experts=2, num_experts_per_tok=1),
    "ernie4_5_moe": dict(head_dim=8),
    "exaone_moe": dict(head_dim=8),
    "glm4_moe": dict(head_dim=8, n_routed_experts=2, num_experts_per_tok=1, n_group=1, topk_group=1),
    "minimax_m2": dict(head_dim=8),
    "hunyuan_v1_moe": dict(head_dim=8),
    "hy_v3": dict(head_dim=8, num_experts=2, num_experts_per_tok=1),
    "internlm3": dict(head_dim=8),
    "iquestcoder": dict(head_dim=8),
    "param2moe": dict(head_dim=8),
    "minimax_m3_vl_text": dict(head_dim=8),
    "modernbert-decoder": dict(bos_token_id=1, eos_token_id=2, sep_token_id=3, cls_token_id=4, local_attention=6),
    "kolibri1": dict(head_dim=8),
    "laguna": dict(head_dim=8, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16),
    "lara_mini": dict(head_dim=8),
    "minicpm5_moe": dict(head_dim=8, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16),
    "sarvam_moe": dict(head_dim=8, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16),
    "mimo_v2_flash": dict(head_dim=8, num_experts=2, num_experts_per_tok=1, n_routed_experts=2, moe_intermediate_size=16),
    "gemma4_unified_text": dict(head_dim=8, global_head_dim=8, vocab_size_per_layer_input=VOCAB,
                                hidden_size_per_layer_input=8, layer_types=["sliding_attention", "full_attention"],
                                sliding_window=6),
    "cwm": dict(head_dim=8, bos_token_id=1, sliding_window=6),
    "dots1": dict(head_dim=8, n_routed_experts=2, num_experts_per_tok=1, n_shared_experts=1, moe_intermediate_size=16,
                  first_k_dense_replace=1, n_group=1, topk_group=1),
    # Hybrids: PSA shears the softmax-attention layers; the others (convolution, linear attention) stay as they are.
    "lfm2": dict(head_dim=8),
    "minimax": dict(head_dim=8),
    "olmo_hybrid": dict(head_dim=8),
    "qwen3_5_text": dict(head_dim=8, num_hidden_layers=4),  # gated delta-net layers, then one attention layer
    "qwen3_5_moe_text": dict(head_dim=8, num_hidden_layers=4, num_experts=2, num_experts_per_tok=1,
                             moe_intermediate_size=16, shared_expert_intermediate_size=16),
    "lfm2_moe": dict(head_dim=8, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16, num_dense_layers=1,
                     bos_token_id=1, layer_types=["conv", "full_attention"]),
    # RoPE is optional here (position_embedding_type="rope"); without it the dry run refuses the model (no RoPE)
    "granitemoehybrid": dict(head_dim=8, layer_types=["mamba", "attention"], mamba_n_heads=4, mamba_d_head=16,
                             mamba_d_state=8, mamba_chunk_size=8, num_local_experts=2, num_experts_per_tok=1,
                             position_embedding_type="rope"),
    "bamba": dict(head_dim=8, attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8,
                  mamba_chunk_size=8),  # a Mamba-2 layer, then an attention layer
    "qwen3_5_moe": dict(text_config=dict(head_dim=8, num_hidden_layers=4, num_experts=2, num_experts_per_tok=1,
                                         moe_intermediate_size=16, shared_expert_intermediate_size=16),
                        vision_config=dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=32)),
    "qwen3_next": dict(head_dim=8, num_hidden_layers=4, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
                       shared_expert_intermediate_size=16),
    # Multimodal and speech models on text alone (a one-layer vision or audio tower).
    "fuyu": dict(text_config=dict(head_dim=8), patch_size=4, image_size=8, image_token_id=60),  # Persimmon's decoder
    "moss_transcribe_diarize": dict(text_config=dict(head_dim=8), audio_token_id=60, audio_config=dict(
        d_model=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=16, num_mel_bins=8)),
    "phi4_multimodal": dict(head_dim=8, vision_config=dict(hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                            num_attention_heads=2, image_size=8, patch_size=4),
                            audio_config=dict(hidden_size=16, intermediate_size=16, num_blocks=1, num_attention_heads=2)),
    "cohere_compass_text": dict(head_dim=8, layer_types=["sliding_attention", "full_attention"], sliding_window=6,
                                rope_parameters={t: dict(rope_type="default", rope_theta=1e4)
                                                 for t in ("sliding_attention", "full_attention")}),
    "gemma4_unified": dict(text_config=dict(head_dim=8, global_head_dim=8, vocab_size_per_layer_input=VOCAB,
                                            hidden_size_per_layer_input=8, sliding_window=6,
                                            layer_types=["sliding_attention", "full_attention"]),
                           audio_token_id=54, boi_token_id=55, eoi_token_id=56, image_token_id=57, video_token_id=58,
                           boa_token_id=59, eoa_token_index=60),
    # Moshi's temporal transformer (its depth decoder and audio codec are not run by the causal LM)
    "moshi": dict(head_dim=8, ffn_dim=48, depth_decoder_config=dict(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=8, ffn_dim=16),
        audio_encoder_config=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_filters=4,
                                  codebook_size=8, codebook_dim=8)),
    # Attention arguments transformers' SDPA refuses: tested with the eager kernel.
    "gemma2": dict(head_dim=8, sliding_window=6, attn_logit_softcapping=2.0),  # soft-capping, sliding windows
    "vaultgemma": dict(head_dim=8, sliding_window=6, attn_logit_softcapping=2.0),
    "gpt_oss": dict(head_dim=8, num_local_experts=2, num_experts_per_tok=1, sliding_window=6),  # attention sinks
    "granite_swa": dict(head_dim=8, sliding_window=6),  # attention sinks (no SDPA path in transformers)
    "granitemoe_swa": dict(head_dim=8, sliding_window=6, num_local_experts=2, num_experts_per_tok=1),
}
TESTED: tuple[str, ...] = tuple(TINY)
# One model type per attention family (the code path its attention module takes): CI runs these.
REPRESENTATIVES: tuple[str, ...] = ("llama", "qwen3", "mistral", "smollm3", "mixtral", "gemma3_text", "granite",
                                    "phi", "phi3", "gpt_neox", "cohere", "glm", "falcon", "gemma2", "gpt_oss",
                                    "olmo_hybrid")
# Model types whose attention takes arguments transformers' SDPA refuses (soft-capping, sinks).
EAGER: frozenset[str] = frozenset({"gemma2", "vaultgemma", "gpt_oss", "granite_swa", "granitemoe_swa"})


def base_kernel(model_type: str) -> str:
    """The base attention kernel a model type is tested with (``eager`` where SDPA cannot run it: the
    types in ``EAGER`` and those transformers gives no SDPA path)."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    if model_type in EAGER:
        return "eager"
    return "sdpa" if getattr(MODEL_FOR_CAUSAL_LM_MAPPING[CONFIG_MAPPING[model_type]], "_supports_sdpa", True) else "eager"


def _config(model_type: str, settings: dict, num_key_value_heads: int, overrides: dict):
    """The config of ``model_type`` from TINY_COMMON and ``settings``; for a multimodal type (whose settings
    have a ``text_config``) TINY_COMMON and the overrides go to the language model's config."""
    import transformers

    common = dict(TINY_COMMON, num_key_value_heads=num_key_value_heads)
    # fields a config computes and refuses to be given (ProphetNet's num_hidden_layers, XLNet's max_position_embeddings)
    computed = {k for k in common if isinstance(getattr(transformers.CONFIG_MAPPING[model_type], k, None), property)}
    common = {k: v for k, v in common.items() if k not in computed}
    if "text_config" in settings:
        return transformers.AutoConfig.for_model(
            model_type, **{**settings, "text_config": {**common, **settings["text_config"], **overrides}})
    return transformers.AutoConfig.for_model(model_type, **{**common, **settings, **overrides})


def tiny_config(model_type: str, gqa: bool = True, **overrides):
    """The config of a 2-layer model of ``model_type`` with 4 query heads and 2 (GQA) or 4 (MHA) KV heads."""
    return _config(model_type, TINY[model_type], 2 if gqa else 4, overrides)


_MLA = dict(num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8,
            n_routed_experts=2, num_experts_per_tok=1, moe_intermediate_size=16, first_k_dense_replace=1, n_group=1,
            topk_group=1)
# The decoder of an encoder-decoder family, as a causal LM.
_DECODER = dict(decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=48, encoder_layers=2,
                encoder_attention_heads=4, encoder_ffn_dim=48, d_model=32)
_INKLING2 = dict(head_dim=8, swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=8, sliding_window_size=6,
                 d_rel=4, rel_extent=16, moe_intermediate_size=16, n_routed_experts=2, num_experts_per_tok=1,
                 unpadded_vocab_size=VOCAB, n_layers_per_attn_res_block=1, layer_types=["hybrid_sliding", "hybrid"],
                 eos_token_id=None)
_MUSICGEN = dict(decoder=dict(vocab_size=VOCAB, hidden_size=32, ffn_dim=48, num_hidden_layers=2, num_attention_heads=4,
                              num_codebooks=1, pad_token_id=VOCAB - 1, bos_token_id=VOCAB - 1),
                 text_encoder=dict(model_type="t5", vocab_size=VOCAB, d_model=16, d_kv=4, d_ff=16, num_layers=1, num_heads=4),
                 audio_encoder=dict(model_type="encodec", hidden_size=16, num_filters=4, codebook_size=8, codebook_dim=16,
                                    upsampling_ratios=[2], num_residual_layers=1))
_BLT_LOCAL = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=1, hidden_size_global=64, vocab_size=VOCAB)
_QWEN4_EXP = dict(head_dim=8, num_hidden_layers=4, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
                  shared_expert_intermediate_size=16, hc_lowrank=8, linear_key_head_dim=8, linear_value_head_dim=8,
                  linear_num_key_heads=2, linear_num_value_heads=4, indexer_n_heads=2, indexer_kv_heads=1,
                  indexer_head_dim=8, indexer_budget=4, indexer_compress_ratio=2)
_DOTS3_TEXT = dict(_MLA, head_dim=8, mlp_layer_types=["dense", "sparse"], per_layer_config={}, sliding_window=6,
                   layer_types=["sliding_attention", "full_attention"], index_head_dim=8, index_n_heads=2,
                   shared_experts_intermediate_size=16)
# Model types refused by the dry run of ``apply_psa``, with the tiny config that shows why (beyond TINY_COMMON).
REFUSED: dict[str, dict] = {
    "gpt2": {},  # learned absolute positions: no rotary embeddings
    # recurrent blocks keep their state in the module, reset only when the model makes its own cache
    "recurrent_gemma": dict(head_dim=8, block_types=["recurrent", "attention"], lru_width=32, attention_window_size=6),
    "opt": {},
    "biogpt": {},
    "ctrl": {},
    "bert": dict(is_decoder=True),
    "diffllama": dict(head_dim=8),  # differential attention: two attention calls per layer
    "doge": dict(head_dim=8),  # attends with a dynamic mask of its own
    "gpt_bigcode": {},
    "gpt-sw3": {},
    "inkling_text": dict(head_dim=8),
    "hrm_text": dict(head_dim=8),  # its modules run several times per forward, each time on another cache layer
    # an input, a recurrent (run twice, on a cache layer per loop) and an output block, each attention then MLP
    "dory": dict(head_dim=8, num_hidden_layers=6, layer_types=["full_attention", "mlp", "sliding_attention", "mlp"] + [
        "full_attention", "mlp"], n_input_layers=2, n_recurrent_layers=2, n_output_layers=2, n_recurrent_loops=2,
                 sliding_window=6),
    # indexed-attention layers attend to the keys and values their indexer picks after the update
    "kolibri1_1": dict(head_dim=16, layer_types=["sliding_attention", "indexed_attention"], index_layers=[1],
                       kv_source_layers=[0, 1], mlp_only_layers=[], num_local_experts=2, num_experts_per_tok=1,
                       moe_intermediate_size=16, shared_expert_intermediate_size=16, sliding_window=6,
                       mlp_only_intermediate_size=48, index_num_heads=2, index_topk=4, index_pool_size=8,
                       index_compression=2, index_num_local_tokens=2, index_num_sink_tokens=1),
    # a drafter: it attends to the keys and values of the model it drafts for (shared_kv_states) and runs beside it
    "gemma4_assistant": dict(text_config=dict(head_dim=8, global_head_dim=8, hidden_size_per_layer_input=0,
                                              vocab_size_per_layer_input=0, sliding_window=6,
                                              layer_types=["sliding_attention", "full_attention"]),
                             backbone_hidden_size=32, num_centroids=8, centroid_intermediate_top_k=2),
    "roberta": dict(is_decoder=True),
    "xlm-roberta": dict(is_decoder=True),
    "camembert": dict(is_decoder=True),
    "electra": dict(is_decoder=True),
    "nemotron_h": dict(head_dim=8),
    "lfm3": dict(head_dim=8),  # attends with code of its own
    "zaya": dict(head_dim=8),  # attends with a mask of its own
    "falcon_h1": dict(head_dim=8),  # attention keys and linear-attention state in one cache layer
    # Multi-latent attention: the cache holds a latent that keys and values share, expanded after the update.
    "deepseek_v3": _MLA,
    "deepseek_v2": _MLA,
    "deepseek_v32": _MLA,
    "minicpm3": _MLA,
    "glm4_moe_lite": dict(_MLA, n_shared_experts=1),
    "longcat_flash": dict(_MLA, num_layers=2, head_dim=4, zero_expert_num=1, expert_ffn_hidden_size=16, moe_topk=1),
    "sarvam_mla": _MLA,
    "axk1": dict(_MLA, head_dim=4, mlp_layer_types=["dense", "sparse"]),
    "youtu": dict(_MLA, head_dim=4),
    "dots3_note_text": _DOTS3_TEXT,
    # Hybrids of linear attention and multi-latent attention (Kimi Linear's without RoPE)
    "bailing_hybrid": dict(_MLA, head_dim=4, layer_types=["linear_attention", "full_attention"],
                           mlp_layer_types=["dense", "sparse"], num_experts=2, num_experts_per_token=1, num_expert_group=1,
                           linear_head_dim=8, linear_num_heads=4, expert_swiglu_limit_list=[0, 0],
                           share_expert_swiglu_limit_list=[0, 0], layer_group_size=2, num_nextn_predict_layers=0),
    "kimi_linear": dict(_MLA, head_dim=4, layer_types=["linear_attention", "full_attention"],
                        mlp_layer_types=["dense", "sparse"], num_experts=2, num_experts_per_token=1, num_expert_group=1,
                        linear_head_dim=8, linear_num_heads=4),
    "deepseek_v4": dict(head_dim=8, n_routed_experts=2, num_experts_per_tok=1, moe_intermediate_size=16),
    # Multi-latent attention with a sparse-attention indexer (which turns its own keys after the update).
    "glm_moe_dsa": dict(_MLA, head_dim=8),
    "axk2": dict(_MLA, head_dim=8),
    "hy_v4": dict(_MLA, head_dim=8, mlp_layer_types=["dense", "sparse"], layer_types=["indexed_attention"] * 2,
                  indexer_types=["full", "shared"], index_head_dim=8, index_n_heads=2, hc_mult=2, index_topk=4),
    "jetmoe": {},  # mixture of attention heads: keys and values projected after the update
    # Attention written without the registered function, or no attention at all (state-space and recurrent models).
    "bloom": {},  # ALiBi
    "mpt": {},
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=6),
    "gpt_neox_japanese": {},
    "openai-gpt": {},
    # its vision encoder cannot switch attention implementations, so the model keeps its own
    "got_ocr2": dict(text_config=dict(head_dim=8), image_token_index=60, image_seq_length=4, vision_config=dict(
        hidden_size=16, output_channels=16, num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=4,
        mlp_dim=16, global_attn_indexes=[0], window_size=2)),
    "git": dict(vision_config=dict(hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   image_size=8, patch_size=4)),
    "reformer": dict(is_decoder=True, attn_layers=["local", "local"], axial_pos_shape=[8, 32], axial_pos_embds_dim=[16, 16],
                     attention_head_size=8, feed_forward_size=48, local_attn_chunk_length=8),  # LSH and local attention
    "xlm": {},
    "trocr": {},
    "roformer": dict(is_decoder=True),  # rotary embeddings inside its own attention code
    "big_bird": dict(is_decoder=True),
    "megatron-bert": dict(is_decoder=True),
    "rembert": dict(is_decoder=True),
    "mamba": {},
    "mamba2": dict(num_heads=8, head_dim=8, n_groups=1, state_size=8, chunk_size=8),
    "falcon_mamba": {},
    "rwkv": {},
    # Learned absolute positions in BERT-style decoders.
    "bert-generation": dict(is_decoder=True),
    "data2vec-text": dict(is_decoder=True),
    "ernie": dict(is_decoder=True),
    "roberta-prelayernorm": dict(is_decoder=True),
    "xlm-roberta-xl": dict(is_decoder=True),
    "xmod": dict(is_decoder=True, default_language="en_XX"),
    "whisper": dict(_DECODER, num_mel_bins=8, max_source_positions=16),  # the decoder of an encoder-decoder model
    **{t: _DECODER for t in ("bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "mvp",
                             "pegasus", "plbart")},
    "roc_bert": dict(is_decoder=True, pronunciation_vocab_size=8, shape_vocab_size=8, pronunciation_embed_dim=8,
                     shape_embed_dim=8),
    "flint": dict(head_dim=8),
    # Hybrids whose attention layers have no RoPE (Mamba layers carry the order).
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, num_experts=2, num_experts_per_tok=1, mamba_d_state=8,
                  use_mamba_kernels=False),
    "zamba": dict(layers_block_type=["mamba", "hybrid"], attention_head_dim=8, mamba_d_state=8, use_mamba_kernels=False),
    "zamba2": dict(layers_block_type=["mamba", "hybrid"], mamba_d_state=8, n_mamba_heads=4, adapter_rank=4,
                   use_mamba_kernels=False),
    # Attention with code of its own (relative position terms), or none at all (xLSTM).
    "prophetnet": dict(num_encoder_layers=2, num_decoder_layers=2, num_decoder_attention_heads=4, encoder_ffn_dim=48,
                       decoder_ffn_dim=48, num_buckets=8, relative_max_distance=16),
    "xlnet": dict(d_model=32, n_layer=2, n_head=4, d_inner=48),
    "xglm": dict(ffn_dim=48),  # sinusoidal positions
    "cpmant": dict(prompt_length=4, prompt_types=3, segment_types=3, dim_ff=48, dim_head=8, position_bias_num_buckets=8,
                   position_bias_max_distance=16),
    "xlstm": dict(hidden_size=64, qk_dim_factor=1.0, num_heads=4, chunk_size=4),
    # relative position biases instead of RoPE
    "inkling2_text": _INKLING2,
    "inkling2_loop_text": dict(_INKLING2, num_hidden_layers=3, layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding"],
                               loop_layer_index_start=1, loop_layer_index_end=2, loop_num_passes=2, loop_gate_rank=4),
    # MusicGen's decoder (sinusoidal positions), its causal LM built from the decoder's config (see SUBCONFIG)
    "musicgen": _MUSICGEN,
    "musicgen_melody": _MUSICGEN,
    # cross-attention from bytes to patches and back, keys that are never cached
    "blt": dict(encoder_config=_BLT_LOCAL, decoder_config=dict(_BLT_LOCAL, intermediate_size=48),
                global_config=dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=1, intermediate_size=48),
                patcher_config=dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=1, intermediate_size=48,
                                    vocab_size=VOCAB),
                encoder_hash_byte_group_vocab=64, local_attention_window_len=16, patch_size=2, patching_mode="static"),
    # attends with the mask its indexer selects
    "qwen4_exp_text": _QWEN4_EXP,
    "qwen4_exp": dict(text_config=_QWEN4_EXP, vision_config=dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2,
                                                                 out_hidden_size=32)),
    "dots3_note": dict(text_config=_DOTS3_TEXT, vision_config=dict(
        hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, patch_size=4, adapter_in_dim=16,
        adapter_out_dim=32, mlp_layer_types=["dense"], per_layer_config={}), audio_config=dict(
        hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, adapter_input_size=16,
        adapter_out_dim=32, downsample_hidden_size=16)),
    "gemma4_unified_assistant": dict(text_config=dict(head_dim=8, global_head_dim=8, hidden_size_per_layer_input=0,
                                                      vocab_size_per_layer_input=0, sliding_window=6,
                                                      layer_types=["sliding_attention", "full_attention"]),
                                     backbone_hidden_size=32, num_centroids=8, centroid_intermediate_top_k=2),
}
# Refused types whose own code fails in float64 (without PSA): their dry run runs in float32.
FLOAT32: frozenset[str] = frozenset({"xglm", "inkling2_text", "inkling2_loop_text"})
# Types whose causal LM takes a part of the type's config (AutoModelForCausalLM.from_config fails on the whole).
SUBCONFIG: dict[str, str] = {"musicgen": "decoder", "musicgen_melody": "decoder"}
# Types neither tested nor refused, and why.
UNTESTED: dict[str, str] = {
    **{t: "transformers cannot reload the saved causal LM: it saves a text config (model type "
          f"{t}_text_model) that AutoModelForCausalLM does not map, without PSA too" for t in ("emu3", "mllama")},
    "gemma3n": "its vision tower is a timm model, and timm (with torchvision, which pins its torch) is not in the test "
               "extra; its language model is gemma3n_text (supported)",
}


def tiny_model(model_type: str, **overrides):
    """A tiny random float64 model (float32 for ``FLOAT32``) of a tested or refused ``model_type`` (eval mode, on the
    CPU)."""
    import torch
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if model_type in REFUSED and model_type not in TINY:
        config = _config(model_type, REFUSED[model_type], 2, overrides)
    else:
        config = tiny_config(model_type, **overrides)
    torch.manual_seed(0)
    if model_type in SUBCONFIG:
        model = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])._from_config(
            getattr(config, SUBCONFIG[model_type]), attn_implementation=base_kernel(model_type))
    else:
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation=base_kernel(model_type), experts_implementation="eager")
    return (model.float() if model_type in FLOAT32 else model.double()).eval()


def support_rows() -> list[tuple[str, str, str]]:
    """(model type, status, what the dry run found, why it refused or why it is untested) for every causal-LM
    model type of the installed transformers: ``supported`` (tested), ``refused`` or ``untested``."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from psattn.integrations.hf.detect import find_attention

    rows = []
    for model_type in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        if model_type in TINY:
            found = find_attention(tiny_model(model_type), base_kernel(model_type)).describe()
            rows.append((model_type, "supported", found + ("" if base_kernel(model_type) == "sdpa" else "; eager kernel")))
        elif model_type in REFUSED:
            try:
                find_attention(tiny_model(model_type), base_kernel(model_type))
            except NotImplementedError as err:
                rows.append((model_type, "refused", str(err)))
            else:
                raise AssertionError(f"{model_type} is listed as refused but passes the dry run")
        else:
            rows.append((model_type, "untested", UNTESTED.get(model_type, "")))
    return rows


def support_page(rows: list[tuple[str, str, str]]) -> str:
    """docs/hf_support.md: the counts and the table."""
    counts = {s: sum(r[1] == s for r in rows) for s in ("supported", "refused", "untested")}
    import transformers

    lines = [
        "# Hugging Face model types",
        "",
        f"Every causal-LM model type of transformers {transformers.__version__} "
        f"(`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, {len(rows)} types): **{counts['supported']} supported**, "
        f"{counts['refused']} refused, {counts['untested']} untested. Supported: `apply_psa`'s dry run finds the "
        "pattern and `tests/integrations/test_hf_families.py` checks every guarantee on a tiny random model (CI runs it "
        "on one type per attention family, `support.REPRESENTATIVES`, and `pytest -m hf_matrix` on every other type); "
        "refused: the dry run's one-line reason on a tiny random model; untested: the family test cannot run it "
        "here, for the reason given (the dry run decides when `apply_psa` is called). Generated by "
        "`python -m psattn.integrations.hf.support` and checked by `tests/integrations/test_hf_support.py`.",
        "",
        "| model type | status | what the dry run found (untested: why) |",
        "|---|---|---|",
    ]
    lines += [f"| `{t}` | {s} | {note.replace('|', '/')} |" for t, s, note in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import logging

    logging.disable(logging.WARNING)
    print(support_page(support_rows()), end="")
