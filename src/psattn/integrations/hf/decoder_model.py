"""A trained psattn ``DecoderLM`` as a transformers model (``psattn export --format hf``).

DecoderLM's blocks (LayerNorm with a bias, a GELU MLP with biases, tied embeddings, PSA or a key-lag
module in attention) match no transformers architecture exactly: the Llama family that
``apply_psa`` patches uses RMSNorm and a gated SiLU MLP. So the export is a
registered ``psattn`` model type: ``PsattnConfig`` carries the model's config (its PSA settings
included) and ``PsattnForCausalLM`` wraps the DecoderLM itself, weights and hook points unchanged.
After ``import psattn.integrations.hf`` (which imports this module),
``AutoModelForCausalLM.from_pretrained``, ``pipeline("text-generation")``, PEFT and the head diagnostics
(``psattn.models.heads.head_scores``) work on it. Generation recomputes the whole sequence each step
(``generation_config.use_cache`` is off): psattn's own ``generate`` keeps the sheared-key cache.
"""

from __future__ import annotations

import json
from pathlib import Path
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
                module.inv_freq.copy_(module.frequencies())

    def get_input_embeddings(self):
        """The token embedding."""
        return self.decoder.embed

    def get_output_embeddings(self):
        """The LM head."""
        return self.decoder.lm_head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None, **kwargs) -> CausalLMOutputWithPast:
        """input_ids (B, T) -> logits (B, T, V); ``labels`` (B, T) give the shifted next-token loss (-100 ignored)."""
        logits = self.decoder(input_ids, attention_mask=attention_mask, position_ids=position_ids)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                     labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)


AutoConfig.register(MODEL_TYPE, PsattnConfig, exist_ok=True)
AutoModelForCausalLM.register(PsattnConfig, PsattnForCausalLM, exist_ok=True)


def to_hf(model: DecoderLM, context: int) -> PsattnForCausalLM:
    """``model`` (weights shared, not copied) as a transformers model trained on ``context`` tokens."""
    wrapped = PsattnForCausalLM(PsattnConfig(model.config.to_dict(), max_position_embeddings=context))
    wrapped.decoder = model
    return wrapped.eval()


def hf_tokenizer(tokenizer_json: str):
    """A transformers fast tokenizer for a psattn run's tokenizer.json (byte or BPE): the same ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte -> printable symbol map

    saved = json.loads(tokenizer_json)
    if saved["kind"] == "bpe":
        tok = Tokenizer.from_str(json.dumps(saved["tokenizer"]))
    else:  # byte ids are the byte values: byte-level BPE over the 256 byte symbols, with no merges
        symbols = bytes_to_unicode()
        tok = Tokenizer(models.BPE(vocab={symbols[b]: b for b in range(256)}, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def export_hf(run_dir: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Save a trained run (its last checkpoint) as a transformers checkpoint in the folder ``out``, with
    its tokenizer when it has one (text runs). The folder is written whole beside ``out`` and then put
    in its place, replacing an earlier export there as a whole (``psattn.export.staging``); a folder
    holding files psattn did not write is replaced only with ``force``.

    Args:
        run_dir: the run directory (config.json, checkpoint.pt, and tokenizer.json for a text run).
        out: the folder to write.
        force: replace a folder that holds files psattn did not write.

    Returns:
        The folder, which ``AutoModelForCausalLM.from_pretrained`` loads after ``import psattn.integrations.hf``.

    Examples:
        >>> import tempfile, torch
        >>> from transformers import AutoModelForCausalLM
        >>> from psattn.experiments.configs import small_config
        >>> from psattn.integrations.hf.decoder_model import export_hf
        >>> from psattn.training import load_trained, train
        >>> run, out = tempfile.mkdtemp(), tempfile.mkdtemp() + "/hf"
        >>> _ = train(small_config("key_only", 1.0, steps=5, early_stop=False, batch_size=8, device="cpu"), run)
        >>> model = AutoModelForCausalLM.from_pretrained(export_hf(run, out))
        >>> ids = torch.randint(0, 64, (1, 12))
        >>> with torch.no_grad():
        ...     torch.allclose(model(ids).logits, load_trained(run)(ids), atol=1e-6)
        True
    """
    from psattn.export.staging import staged_folder
    from psattn.training.config import RunConfig
    from psattn.training.run_dir import load_trained

    run_dir, out = Path(run_dir), Path(out)
    model = load_trained(run_dir)
    config = RunConfig.from_file(run_dir / "config.json")
    wrapped = to_hf(model, getattr(config.task, "seq_len", 256))
    tokenizer = (run_dir / "tokenizer.json").read_text() if (run_dir / "tokenizer.json").exists() else None
    with staged_folder(out, force=force, what="a Hugging Face export", keep=[run_dir]) as staging:
        wrapped.save_pretrained(staging)
        if tokenizer is not None:
            hf_tokenizer(tokenizer).save_pretrained(staging)
    return out
