"""What PSA does inside one patched model: the variant, gamma, placement and boundary rule."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from psattn.fields import check_choices, from_fields
from psattn.ops.shear import Boundary, check_gamma
from psattn.ops.variants import Placement, variant_gammas

#: the PSA variants the transformers integration supports (no learned key-lag baselines)
PSAVariant = Literal["baseline", "symmetric", "key_only", "query_only"]

# Base attention kernels PSA can run on: the shear happens first, then the named kernel attends.
BASES = ("sdpa", "eager")


@dataclass(frozen=True)
class PSASpec:
    """PSA settings of one model (immutable, so two models in one process never share state).

    ``max_rollback`` is how many tokens a ``PSALayer`` can be
    cropped back beyond the last forward call (assisted decoding crops at most the last call's
    tokens, which needs no extra window; a PSA *assistant* model needs ``max_rollback`` >= its
    ``num_assistant_tokens``). ``keep_last_call=False`` drops the last call's raw values as soon as
    the call is done, so the extra state is O(1) right after a long prefill too, at the price of
    crops (assisted decoding of this model) reaching back only ``max_rollback`` tokens.
    """

    variant: PSAVariant = "key_only"
    gamma: float = 0.8
    placement: Placement = "post_rope"
    boundary: Boundary = "replicate"
    max_rollback: int = 0
    keep_last_call: bool = True

    def __post_init__(self) -> None:
        check_choices(self, "PSA")
        object.__setattr__(self, "gamma", check_gamma(self.gamma))
        if self.variant == "baseline" and self.gamma != 0.0:
            raise ValueError(f"the baseline has no shear, so gamma must be 0 (got {self.gamma}); pick a PSA variant")
        if isinstance(self.max_rollback, bool) or not isinstance(self.max_rollback, int) or self.max_rollback < 0:
            raise ValueError(f"max_rollback must be an int >= 0, got {self.max_rollback!r}")
        if not isinstance(self.keep_last_call, bool):
            raise ValueError(f"keep_last_call must be True or False, got {self.keep_last_call!r}")
        if self.placement != "post_rope":
            raise NotImplementedError(
                f"placement={self.placement!r} is not supported by the transformers integration: the models apply "
                "RoPE inside the attention module, before any extension point, so only the post-RoPE shear (the "
                "paper's operator) can be placed exactly. Use psattn's own DecoderLM for the pre-RoPE ablation."
            )

    @property
    def gamma_q(self) -> float:
        return variant_gammas(self.variant, self.gamma)[0]

    @property
    def gamma_k(self) -> float:
        return variant_gammas(self.variant, self.gamma)[1]

    def to_dict(self) -> dict:
        """Plain values, as stored in a saved model's ``config.json`` under ``"psa"``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values) -> PSASpec:
        """The inverse of ``to_dict``; raises ValueError on anything else."""
        return from_fields(cls, values, "PSA settings")

    def shear_key(self) -> tuple[float, float, str]:
        """What a cache layer must agree on to be shared between forward calls."""
        return (self.gamma_q, self.gamma_k, self.boundary)
