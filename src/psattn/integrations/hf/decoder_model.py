"""A trained psattn ``DecoderLM`` as a transformers model (what ``psattn export --format hf`` saves,
through ``psattn.export.hf``).

DecoderLM's blocks (LayerNorm with a bias, a GELU MLP with biases, tied embeddings, PSA or a key-lag
module in attention) match no transformers architecture exactly: the Llama family that
``apply_psa`` patches uses RMSNorm and a gated SiLU MLP. So the export is a
registered ``psattn`` model type: ``PsattnConfig`` carries the model's config (its PSA settings
included) and ``PsattnForCausalLM`` wraps the DecoderLM itself, weights and hook points unchanged.
After ``import psattn.integrations.hf`` (which imports this module),
``AutoModelForCausalLM.from_pretrained``, ``pipeline("text-generation")``, PEFT and the head diagnostics
(``psattn.models.heads.head_scores``) work on it. Generation recomputes the whole sequence each step
(``generation_config.use_cache`` is off, and turning it on changes nothing): psattn's own ``generate``
keeps the sheared-key cache.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from psattn.models.config import ModelConfig
from psattn.models.decoder import DecoderLM
from psattn.ops.rope import RotaryEmbedding

MODEL_TYPE = "psattn"


class PsattnConfig(PretrainedConfig):
    """A DecoderLM's ``ModelConfig`` (``psattn_model``) in a transformers config."""

    model_type = MODEL_TYPE

    def __init__(self, psattn_model: dict[str, Any] | None = None, max_position_embeddings: int = 256, **kwargs):
        self.psattn_model = psattn_model or ModelConfig().to_dict()
        model = ModelConfig.from_dict(self.psattn_model)  # validated here, so a bad file fails at load
        self.vocab_size, self.hidden_size = model.vocab_size, model.d_model
        self.num_hidden_layers, self.num_attention_heads = model.n_layers, model.n_heads
        self.max_position_embeddings = max_position_embeddings  # the context the model was trained on
        kwargs.setdefault("tie_word_embeddings", model.tie_embeddings)
        super().__init__(**kwargs)


class PsattnForCausalLM(PreTrainedModel, GenerationMixin):
    """A psattn ``DecoderLM`` as a transformers causal LM (what ``psattn export --format hf`` saves)."""
    config_class = PsattnConfig
    base_model_prefix = "decoder"
    _no_split_modules = ["Block"]
    _tied_weights_keys = {"decoder.lm_head.weight": "decoder.embed.weight"}  # tied when config.tie_word_embeddings

    def __init__(self, config: PsattnConfig):
        super().__init__(config)
        self.decoder = DecoderLM(ModelConfig.from_dict(config.psattn_model))
        self.generation_config.use_cache = False
        self.post_init()

    def _init_weights(self, module):
        """DecoderLM initialises its weights itself and loading overwrites them; the RoPE frequencies
        are a buffer no checkpoint holds, which transformers' loading leaves empty: set them again."""
        if isinstance(module, RotaryEmbedding):
            with torch.no_grad():
                module.inv_freq.copy_(module.frequencies(device=module.inv_freq.device))

    def get_input_embeddings(self):
        """The token embedding."""
        return self.decoder.embed

    def get_output_embeddings(self):
        """The LM head."""
        return self.decoder.lm_head

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, **kwargs) -> dict[str, Any]:
        """Each generation step's inputs: the whole sequence so far, with no transformers cache (the model
        keeps none, so ``use_cache=True`` changes nothing rather than feeding it the last token alone)."""
        for name in ("cache", "past_key_values", "next_sequence_length", "cache_position"):
            kwargs.pop(name, None)
        return super().prepare_inputs_for_generation(input_ids, **kwargs)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                return_dict: bool | None = None, output_hidden_states: bool | None = None,
                **kwargs) -> CausalLMOutputWithPast | tuple:
        """input_ids (B, T) -> logits (B, T, V); ``labels`` (B, T) give the shifted next-token loss (-100 ignored).
        ``output_hidden_states`` adds ``n_layers + 1`` tensors (B, T, C), as transformers' models give them: the
        embeddings, each block's output, the last one through the final norm (the LM head's input).
        ``return_dict=False`` (or ``config.return_dict`` False) gives the tuple ``(loss, logits, hidden_states)``
        without the parts not asked for, as transformers' models do."""
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        hidden: list[torch.Tensor] = []
        modules = (self.decoder.drop, *self.decoder.blocks[:-1], self.decoder.norm_final) if output_hidden_states else ()
        hooks = [m.register_forward_hook(lambda _m, _args, out: hidden.append(out)) for m in modules]
        try:
            logits = self.decoder(input_ids, attention_mask=attention_mask, position_ids=position_ids)
        finally:
            for hook in hooks:
                hook.remove()
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                     labels[:, 1:].reshape(-1), ignore_index=-100)
        out = CausalLMOutputWithPast(loss=loss, logits=logits, hidden_states=tuple(hidden) if hidden else None)
        return out if (self.config.return_dict if return_dict is None else return_dict) else out.to_tuple()


AutoConfig.register(MODEL_TYPE, PsattnConfig, exist_ok=True)
AutoModelForCausalLM.register(PsattnConfig, PsattnForCausalLM, exist_ok=True)


def to_hf(model: DecoderLM, context: int) -> PsattnForCausalLM:
    """``model`` (weights shared, not copied) as a transformers model trained on ``context`` tokens."""
    wrapped = PsattnForCausalLM(PsattnConfig(model.config.to_dict(), max_position_embeddings=context))
    wrapped.decoder = model
    return wrapped.eval()
