"""Typed, validated configuration of the attention layers and the decoder."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from psattn.fields import check_choices, from_fields, plain_numbers
from psattn.models.keylag import KEY_LAG
from psattn.ops.rope import rotary_dim
from psattn.ops.shear import Boundary, check_gamma
from psattn.ops.variants import Placement, variant_gammas

#: the PSA variants (psattn.ops.variants.VARIANTS) and the learned key-lag baselines (models.keylag.KEY_LAG)
Variant = Literal["baseline", "symmetric", "key_only", "query_only", "smeared_keys", "kv_shift", "primer_dconv", "canon"]


@dataclass
class AttentionConfig:
    """Which variant an attention layer uses. For the PSA variants (baseline, symmetric, key_only,
    query_only) gamma_q and gamma_k follow from variant and gamma; the key-lag baselines
    (smeared_keys, kv_shift, primer_dconv, canon) learn their own weights and take no gamma."""

    variant: Variant = "baseline"
    gamma: float = 0.0
    placement: Placement = "post_rope"
    boundary: Boundary = "replicate"

    def __post_init__(self):
        check_choices(self, "attention")
        self.gamma = check_gamma(self.gamma)
        if self.variant == "baseline" and self.gamma != 0.0:
            raise ValueError(f"the baseline has no shear, so gamma must be 0 (got {self.gamma}); pick a PSA variant")
        if self.variant in KEY_LAG and self.gamma != 0.0:
            raise ValueError(f"the key-lag baseline {self.variant!r} takes no gamma (got {self.gamma})")
        if self.variant in KEY_LAG and self.placement != "post_rope":
            raise ValueError(
                f"placement applies to the PSA shear; the key-lag baseline {self.variant!r} acts at its own site "
                "(leave placement at 'post_rope')"
            )

    @property
    def is_key_lag(self) -> bool:
        return self.variant in KEY_LAG

    @property
    def gammas(self) -> tuple[float, float]:
        """(gamma_q, gamma_k); (0, 0) for the key-lag baselines."""
        return (0.0, 0.0) if self.is_key_lag else variant_gammas(self.variant, self.gamma)


def _attention_from_dict(data: dict[str, Any]) -> AttentionConfig:
    return from_fields(AttentionConfig, data, "attention config")


def check_positive_int(name: str, value: Any) -> None:
    """Refuse ``value`` unless it is a positive integer (not a bool): a TypeError naming ``name`` for another
    type (2.5, None), a ValueError for an integer below 1."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be a positive integer, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_heads(d_model: int, n_heads: int, n_kv_heads: int, head_dim: int | None, head_dim_name: str = "d_head") -> None:
    """Refuse, naming the field, widths and head counts of an attention layer that do not fit together (a
    TypeError for one that is not an integer, a ValueError otherwise): positive integers, d_model divisible
    by n_heads (unless ``head_dim``, called ``head_dim_name``, is given) and n_heads a multiple of n_kv_heads."""
    for name, value in (("d_model", d_model), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
        check_positive_int(name, value)
    if head_dim is not None and (not isinstance(head_dim, int) or isinstance(head_dim, bool)):
        raise TypeError(f"{head_dim_name} must be a positive integer or unset, got {head_dim!r}")
    if head_dim is not None and head_dim <= 0:
        raise ValueError(f"{head_dim_name} must be a positive integer or unset, got {head_dim!r}")
    if head_dim is None and d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads}), or give {head_dim_name}")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")


def check_dropout_rate(dropout: Any) -> None:
    """Refuse ``dropout`` unless it is a number in [0, 1): a TypeError for what is not a number, a ValueError
    for another number."""
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)):
        raise TypeError(f"dropout must be a number in [0, 1), got {dropout!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must lie in [0, 1), got {dropout!r}")


Norm = Literal["layernorm", "rmsnorm"]
NORMS: tuple[str, ...] = get_args(Norm)
#: "scaled": every embedding and linear weight ~ N(0, 1 / (3 d_model)), the scale of PyTorch's default
#: nn.Linear init for a d_model-wide input (0.051 at d_model 128; 0.021 at 768, GPT-2's 0.02);
#: "torch": PyTorch's own module defaults (N(0, 1) embeddings, uniform linear weights).
INITS = ("scaled", "torch")


@dataclass
class ModelConfig:
    """A decoder-only transformer. ``attention`` is one config for every layer or one per layer.

    The fields are validated when the config is built (a ValueError names the field); ``to_dict`` and
    ``from_dict`` give and read the JSON form a run directory stores.

    Examples:
        >>> from psattn import AttentionConfig, ModelConfig
        >>> config = ModelConfig(vocab_size=64, n_layers=2, attention=AttentionConfig("symmetric", 0.5))
        >>> [a.variant for a in config.layer_attention_configs()]
        ['symmetric', 'symmetric']
        >>> ModelConfig.from_dict(config.to_dict()) == config
        True
    """

    vocab_size: int = 64
    d_model: int = 128
    n_layers: int = 1
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: as many as n_heads (MHA); fewer: GQA
    mlp: bool | list[bool] = True  # False: attention-only blocks; a list: one flag per layer
    d_mlp: int | None = None  # None: 4 * d_model
    rope_base: float = 10000.0
    rotary_fraction: float = 1.0
    norm: Norm = "layernorm"
    tie_embeddings: bool = True
    dropout: float = 0.0
    attention: AttentionConfig | list[AttentionConfig] = field(default_factory=AttentionConfig)
    d_head: int | None = None  # per-head width d_k; None: d_model / n_heads
    init: float | str = "scaled"  # see INITS: "scaled", "torch", or the std of a normal init of every matrix

    def __post_init__(self):
        check_choices(self, "model")
        plain_numbers(self)  # NumPy's numbers (np.int64(64) was refused as "must be a positive integer")
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        check_heads(self.d_model, self.n_heads, self.n_kv_heads, self.d_head)  # d_model first: d_mlp derives from it
        if self.d_mlp is None:
            self.d_mlp = 4 * self.d_model
        for name in ("vocab_size", "n_layers", "d_mlp"):
            check_positive_int(name, getattr(self, name))
        if self.d_head is not None:
            if self.d_head * self.n_heads == self.d_model:
                self.d_head = None  # the default, written the canonical way (runs then share names)
        number = isinstance(self.init, (int, float)) and not isinstance(self.init, bool)
        if self.init not in INITS and not (number and 0.0 < self.init < math.inf):
            error = ValueError if number or isinstance(self.init, str) else TypeError
            raise error(f"init must be one of {INITS} or a finite positive std, got {self.init!r}")
        if not isinstance(self.tie_embeddings, bool):
            raise TypeError(f"tie_embeddings must be true or false, got {self.tie_embeddings!r}")
        if isinstance(self.mlp, list):
            if not all(isinstance(m, bool) for m in self.mlp):
                raise TypeError(f"mlp must be true, false or one true/false per layer ({self.n_layers}), "
                                f"got {self.mlp!r}")
            if len(self.mlp) != self.n_layers:
                raise ValueError(f"mlp must be true, false or one true/false per layer ({self.n_layers}), "
                                 f"got {self.mlp!r}")
        elif not isinstance(self.mlp, bool):
            raise TypeError(f"mlp must be true, false or one true/false per layer, got {self.mlp!r}")
        if isinstance(self.rope_base, bool) or not isinstance(self.rope_base, (int, float)):
            raise TypeError(f"rope_base must be a finite number > 1, got {self.rope_base!r}")
        if not (self.rope_base > 1.0 and math.isfinite(self.rope_base)):
            raise ValueError(f"rope_base must be a finite number > 1, got {self.rope_base!r}")
        check_dropout_rate(self.dropout)
        rotary_dim(self.head_dim, self.rotary_fraction)
        if isinstance(self.attention, dict):
            self.attention = _attention_from_dict(self.attention)
        if isinstance(self.attention, list):
            self.attention = [_attention_from_dict(a) if isinstance(a, dict) else a for a in self.attention]
            if len(self.attention) != self.n_layers:
                raise ValueError(f"{len(self.attention)} attention configs given for {self.n_layers} layers")
        for a in self.layer_attention_configs():
            if not isinstance(a, AttentionConfig):
                raise TypeError(f"attention must be an AttentionConfig (or a list of them), got {type(a).__name__}")

    @property
    def init_std(self) -> float | None:
        """The std of the normal init of every matrix; None for PyTorch's own defaults."""
        if self.init == "torch":
            return None
        return (3 * self.d_model) ** -0.5 if self.init == "scaled" else float(self.init)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads if self.d_head is None else self.d_head

    def layer_mlps(self) -> list[bool]:
        """Whether each layer's block has an MLP."""
        return list(self.mlp) if isinstance(self.mlp, list) else [self.mlp] * self.n_layers

    def layer_attention_configs(self) -> list[AttentionConfig]:
        """The attention config of each layer (``attention`` repeated, or the per-layer list)."""
        if isinstance(self.attention, list):
            return list(self.attention)
        return [self.attention] * self.n_layers

    def to_dict(self) -> dict[str, Any]:
        """The JSON form a run directory stores (derived defaults left out, so they stay derived)."""
        data = dataclasses.asdict(self)
        if data["d_head"] is None:
            del data["d_head"]  # configs without it read as they always have
        # derived defaults stay derived, so that overriding d_model or n_heads carries them along
        if data["n_kv_heads"] == data["n_heads"]:
            data["n_kv_heads"] = None
        if data["d_mlp"] == 4 * data["d_model"]:
            data["d_mlp"] = None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Build from plain values (a parsed JSON object); anything malformed raises ValueError (a value of the
        wrong type too, which the constructor refuses with a TypeError)."""
        try:
            return from_fields(cls, data, "model config")
        except TypeError as err:
            raise ValueError(f"malformed model config: {err}") from None
