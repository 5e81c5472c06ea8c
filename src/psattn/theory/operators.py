"""The implementation a certificate certifies: the PSA operator, and deliberately broken mutants.

Certificates take an ``OperatorUnderTest`` instead of calling the library directly, so that
each can be shown to *fail* on a broken implementation (none of them can pass vacuously). An
operator bundles everything the certificates exercise:

- ``shear``: the stream map, with the signature of ``psattn.ops.shear.shear``;
- ``placement``: where it acts, "post_rope" (as claimed) or "pre_rope";
- ``cache``: how cached decoding stores keys, "sheared" (the library's cache), "raw_keys" or
  "recompute";
- ``critical_coupling``: the closed-form law gamma_c(d_k, T).

``OperatorUnderTest.sheared`` gives the stream that enters attention as a function of the
post-RoPE stream (the frame the claims are made in); ``OperatorUnderTest.build_model`` builds a
``DecoderLM`` that runs this operator (its ``shear_fn``).

The mutants (``MUTANTS``) are the bugs the certificates must catch: a shear with the wrong sign,
a shear that looks one token ahead instead of back, pre-RoPE placement where post-RoPE is claimed,
a cache that stores raw keys, a cache that re-shears the whole prefix each step, and a law with its
branches swapped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import Tensor

from psattn.models.config import AttentionConfig, ModelConfig, Variant
from psattn.models.decoder import DecoderLM
from psattn.ops.cache import KVBuffer, LayerCache, PSACache, tensor_bytes
from psattn.ops.rope import RotaryEmbedding, apply_rope
from psattn.ops.shear import shear as library_shear
from psattn.ops.variants import Placement
from psattn.theory.transition import C_CONSTANT, gamma_c

CACHE_MODES = ("sheared", "raw_keys", "recompute")


@dataclass(frozen=True)
class OperatorUnderTest:
    """An operator the certificates can run on: a name, a description and its shear."""
    name: str
    description: str
    shear: Callable[..., Tensor] = library_shear
    placement: Placement = "post_rope"
    cache: str = "sheared"
    critical_coupling: Callable = gamma_c
    rope_base: float = 10000.0

    def __post_init__(self):
        if self.placement not in ("post_rope", "pre_rope"):
            raise ValueError(f"unknown placement {self.placement!r}")
        if self.cache not in CACHE_MODES:
            raise ValueError(f"unknown cache mode {self.cache!r}; expected one of {CACHE_MODES}")

    def sheared(self, x: Tensor, gamma: float) -> Tensor:
        """The sheared stream (B, H, T, D) from a post-RoPE stream x at positions 0..T-1."""
        if self.placement == "post_rope":
            return self.shear(x, gamma)
        positions = torch.arange(x.shape[2]).expand(x.shape[0], -1)  # (B, T)
        cos, sin = RotaryEmbedding(x.shape[-1], self.rope_base)(positions, x.dtype)
        raw = apply_rope(x, cos, -sin)  # undo the rotation: the pre-RoPE stream
        return apply_rope(self.shear(raw, gamma), cos, sin)

    def build_model(self, variant: str, gamma: float, *, seed: int = 0, std: float = 0.3,
                    dtype: torch.dtype = torch.float64, **fields) -> DecoderLM:
        """A small eval-mode model running this operator, with weights drawn from ``seed`` (normal
        with ``std``, large enough that outputs depend strongly on the input)."""
        base = dict(vocab_size=37, d_model=32, n_layers=2, n_heads=4, rope_base=self.rope_base)
        attention = AttentionConfig(cast(Variant, variant), gamma, self.placement)  # AttentionConfig checks the variant
        config = ModelConfig(**{**base, **fields}, attention=attention)
        torch.manual_seed(seed)
        model = DecoderLM(config, shear_fn=self.shear).to(dtype).eval()
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    p.normal_(0.0, std)
        return model

    def new_cache(self, model: DecoderLM, max_rollback: int = 0) -> PSACache:
        """The cache this operator decodes with."""
        if self.cache == "sheared":
            return model.new_cache(max_rollback)
        layers: list[LayerCache] = []
        for block in model.blocks:
            a = block.attn
            args = (a.gamma_q != 0.0, a.gamma_k != 0.0, max_rollback)
            layers.append(RawKeyLayerCache(*args) if self.cache == "raw_keys"
                          else RecomputingLayerCache(*args, gamma_k=a.gamma_k, shear=self.shear))
        return PSACache(layers)


class RawKeyLayerCache(LayerCache):
    """Broken: stores the raw keys k where the sheared keys k̂ belong."""

    def append(self, k_hat, v, raw_k, raw_q=None):
        """Store raw keys where sheared ones belong (a wrong cache, for the certificates' negative cases)."""
        return super().append(raw_k, v, raw_k, raw_q)


class RecomputingLayerCache(LayerCache):
    """Correct outputs, wrong cost: keeps every raw key and re-shears the whole prefix each step
    (O(S d) FLOPs per token and O(S) extra state instead of O(1))."""

    def __init__(self, keep_query, keep_key=True, max_rollback=0, *, gamma_k: float, shear=library_shear):
        super().__init__(keep_query, keep_key, max_rollback)
        self.gamma_k, self._shear = gamma_k, shear
        self.all_raw_k: Tensor | None = None

    def append(self, k_hat, v, raw_k, raw_q=None):
        """Keep every raw key and re-shear them all at each step (correct, but O(T) extra state)."""
        self.all_raw_k = raw_k if self.all_raw_k is None else torch.cat([self.all_raw_k, raw_k], dim=2)
        _, values = super().append(k_hat, v, raw_k, raw_q)
        keys = self._shear(self.all_raw_k, self.gamma_k)  # (B, Hkv, S, D), recomputed
        self.buffer = KVBuffer(keys, values, len(self))
        return keys, values

    def extra_state_bytes(self) -> int:
        """Bytes beyond the KV tensors: the parent's plus every raw key kept."""
        return super().extra_state_bytes() + tensor_bytes(self.all_raw_k)


def _wrong_sign_shear(x, gamma, **kw):
    return library_shear(x, -gamma, **kw)


def _look_ahead_shear(x, gamma, *, starts=None, prev=None, boundary="replicate"):
    """x̂_t = (1 + gamma) x_t - gamma x_{t+1}: the lag taken in the wrong direction."""
    nxt = torch.cat([x[..., 1:, :], x[..., -1:, :]], dim=-2)  # (B, H, T, D)
    return torch.lerp(nxt, x, 1.0 + gamma)


def _swapped_law(d_k, T, c: float = C_CONSTANT):
    """gamma_c with its two branches exchanged."""
    d_k, T = np.broadcast_arrays(np.asarray(d_k, float), np.asarray(T, float))
    L = np.log(T - 1)
    above = d_k >= 8 * L
    b1 = 2 * L / (np.sqrt(d_k) + np.sqrt(np.abs(d_k - 8 * L)))
    b2 = 1 / (2 * c**2 * np.sqrt(2 * L))
    out = np.sqrt(np.where(above, b2, b1))
    return float(out) if out.ndim == 0 else out


REFERENCE = OperatorUnderTest("psa", "the library's PSA operator (post-RoPE shear, sheared-key cache)")

MUTANTS: dict[str, OperatorUnderTest] = {
    m.name: m
    for m in (
        OperatorUnderTest("wrong_sign", "shear with the wrong sign: x̂ = x - gamma p", shear=_wrong_sign_shear),
        OperatorUnderTest("look_ahead", "momentum towards the next token: x̂_t = (1+gamma) x_t - gamma x_{t+1}",
                          shear=_look_ahead_shear),
        OperatorUnderTest("pre_rope", "shear applied before RoPE where post-RoPE is claimed", placement="pre_rope"),
        OperatorUnderTest("raw_key_cache", "a cache that stores raw keys instead of sheared ones", cache="raw_keys"),
        OperatorUnderTest("recompute_cache", "a cache that keeps all raw keys and re-shears the prefix each step",
                          cache="recompute"),
        OperatorUnderTest("swapped_law", "the critical-coupling law with its branches swapped",
                          critical_coupling=_swapped_law),
    )
}

OPERATORS: dict[str, OperatorUnderTest] = {REFERENCE.name: REFERENCE, **MUTANTS}


def get_operator(name: str) -> OperatorUnderTest:
    """The operator of that name; ValueError for an unknown one."""
    if name not in OPERATORS:
        raise ValueError(f"unknown operator {name!r}; expected one of {sorted(OPERATORS)}")
    return OPERATORS[name]


__all__ = ["CACHE_MODES", "MUTANTS", "OPERATORS", "OperatorUnderTest", "REFERENCE", "RawKeyLayerCache",
           "RecomputingLayerCache", "get_operator"]
