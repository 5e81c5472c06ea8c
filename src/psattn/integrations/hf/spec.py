"""What PSA does inside one patched model: the attention settings (an ``AttentionConfig``, the
library's own: variant, gamma, placement, boundary rule) and the cache options of ``ShearState``
(``max_rollback``, ``keep_last_call``), kept as one flat record because that is the form a saved
model's ``config.json`` stores under ``"psa"``."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from psattn.fields import check_choices, from_fields
from psattn.models.config import AttentionConfig
from psattn.ops.shear import Boundary
from psattn.ops.shear_state import ShearState
from psattn.ops.variants import Placement, variant_gammas

#: the PSA variants the transformers integration supports (no learned key-lag baselines)
PSAVariant = Literal["baseline", "symmetric", "key_only", "query_only"]

# Base attention kernels PSA can run on: the shear happens first, then the named kernel attends.
BASES = ("sdpa", "eager")


@dataclass(frozen=True)
class PSASpec:
    """PSA settings of one model (immutable, so two models in one process never share state).
    ``variant="baseline"`` takes ``gamma=0`` (the default 0.8 is refused for it, as any γ ≠ 0).

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
    #: the variant's query and key shears, set from variant and gamma (read by every attention call): fields
    #: that are neither arguments nor compared, since a ``functools.cached_property`` takes a lock that
    #: torch.compile cannot trace on Python 3.11 (a graph break at every layer)
    gamma_q: float = field(init=False, repr=False, compare=False)
    gamma_k: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_choices(self, "PSA")  # the PSA variants only: the key-lag baselines have no transformers form
        object.__setattr__(self, "gamma", self.attention.gamma)  # AttentionConfig checks gamma and the baseline
        self._set_gammas()
        ShearState(self.max_rollback, self.keep_last_call)  # checks max_rollback and keep_last_call
        if self.placement != "post_rope":
            raise NotImplementedError(
                f"placement={self.placement!r} is not supported by the transformers integration: the models apply "
                "RoPE inside the attention module, before any extension point, so only the post-RoPE shear (the "
                "paper's operator) can be placed exactly. Use psattn's own DecoderLM for the pre-RoPE ablation."
            )

    def _set_gammas(self) -> None:
        """Set ``gamma_q`` and ``gamma_k`` from the variant and gamma."""
        for name, value in zip(("gamma_q", "gamma_k"), variant_gammas(self.variant, self.gamma), strict=True):
            object.__setattr__(self, name, value)

    def __setstate__(self, state: dict) -> None:
        """Unpickle (``torch.save(model)``, ``copy.deepcopy``): a spec pickled before ``gamma_q`` and ``gamma_k``
        were fields holds them only where they had been read, so they are set again."""
        self.__dict__.update(state)
        self._set_gammas()

    @property
    def attention(self) -> AttentionConfig:
        """The attention settings as the library's ``AttentionConfig`` (what a ``DecoderLM`` layer takes; a
        new object each time, so changing it changes nothing here)."""
        return AttentionConfig(self.variant, self.gamma, self.placement, self.boundary)

    def to_dict(self) -> dict:
        """Plain values, as stored in a saved model's ``config.json`` under ``"psa"``."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

    @classmethod
    def from_dict(cls, values) -> PSASpec:
        """The inverse of ``to_dict``; raises ValueError on anything else (a value of the wrong type too: the
        settings are read from a file)."""
        try:
            return from_fields(cls, values, "PSA settings")
        except TypeError as err:
            raise ValueError(f"malformed PSA settings: {err}") from None

    def shear_key(self) -> tuple[float, float, str]:
        """What a cache layer must agree on to be shared between forward calls."""
        return (self.gamma_q, self.gamma_k, self.boundary)
