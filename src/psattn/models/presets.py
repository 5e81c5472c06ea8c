"""Model sizes across the paper's range (about 4M, 20M and 92M parameters).

The counts quoted are exact for the default vocabulary of 8192 tokens with tied embeddings;
``preset_parameter_count`` recomputes them for any overrides. ``psa-4m`` and ``psa-20m`` train
on a CPU; ``psa-92m`` is meant for a GPU.
"""

from __future__ import annotations

from psattn.fields import from_fields
from psattn.models.config import ModelConfig

PRESETS: dict[str, dict] = {
    "psa-4m": dict(vocab_size=8192, d_model=256, n_layers=3, n_heads=4),
    "psa-20m": dict(vocab_size=8192, d_model=512, n_layers=5, n_heads=8),
    "psa-92m": dict(vocab_size=8192, d_model=768, n_layers=12, n_heads=12),
}


def preset(name: str, **overrides) -> ModelConfig:
    """A ``ModelConfig`` for a named preset, with any field overridden."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}")
    from_fields(ModelConfig, overrides, "model config")  # refuses unknown overrides before building
    return ModelConfig(**{**PRESETS[name], **overrides})


def preset_parameter_count(config: ModelConfig) -> int:
    """Exact number of parameters of a ``DecoderLM`` with ``config``,
    by arithmetic (no model is built), for the PSA variants, which add none; the learned key-lag
    baselines add their own few (count those with ``DecoderLM.num_parameters``)."""
    if not isinstance(config, ModelConfig):  # a preset's name gave "'str' object has no attribute 'd_model'"
        raise TypeError(f"preset_parameter_count takes a ModelConfig (preset(name) makes one), got {type(config).__name__}")
    C, V, L = config.d_model, config.vocab_size, config.n_layers
    assert config.n_kv_heads is not None and config.d_mlp is not None  # filled in by ModelConfig
    q, kv = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
    norm = C if config.norm == "rmsnorm" else 2 * C
    attn = C * q * 2 + C * kv * 2  # q, o and k, v projections (no bias)
    mlp = (C * config.d_mlp + config.d_mlp) + (config.d_mlp * C + C) + norm
    head = 0 if config.tie_embeddings else V * C
    return V * C + L * (norm + attn) + sum(config.layer_mlps()) * mlp + norm + head
