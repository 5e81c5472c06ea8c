"""Named PSA variants: which streams the shear acts on, and where (before or after RoPE)."""

from __future__ import annotations

from typing import Literal, get_args

from psattn.ops.shear import check_gamma

# name -> (query sheared, key sheared)
VARIANTS: dict[str, tuple[bool, bool]] = {
    "baseline": (False, False),
    "symmetric": (True, True),
    "key_only": (False, True),
    "query_only": (True, False),
}
Placement = Literal["post_rope", "pre_rope"]
PLACEMENTS: tuple[str, ...] = get_args(Placement)


def check_variant(variant: str) -> str:
    """``variant`` if it names a PSA variant; TypeError for what is not a name, ValueError for another name."""
    if not isinstance(variant, str):  # a list raised "unhashable type", None was an unknown variant
        raise TypeError(f"variant must be the name of a PSA variant {sorted(VARIANTS)}, got {variant!r}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown PSA variant {variant!r}; expected one of {sorted(VARIANTS)}")
    return variant


def variant_gammas(variant: str, gamma: float) -> tuple[float, float]:
    """(gamma_q, gamma_k) of a named variant at coupling gamma."""
    shear_q, shear_k = VARIANTS[check_variant(variant)]
    gamma = check_gamma(gamma)
    return (gamma if shear_q else 0.0, gamma if shear_k else 0.0)
