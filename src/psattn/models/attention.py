"""The PhaseSpaceAttention layer: project -> rotate -> shear -> attend -> output projection.

Hook points (the table ``psattn.ops.hooks.HOOKS``, which a patched transformers model shares). As in
TransformerLens, a forward hook that returns a tensor replaces the one passing through, and the layer
computes everything after the point from it (activation patching, ablation); a hook that returns
nothing only reads:

- ``hook_q``, ``hook_k``: raw post-RoPE queries (B, Hq, T, D) and keys (B, Hkv, T, D), before the
  shear: a replacement is sheared (with the pre-RoPE ablation, rotated back first) and is what the
  cache keeps as the last raw query or key;
- ``hook_q_sheared``, ``hook_k_sheared``: the q̂, k̂ that enter attention (and the cache);
- ``hook_v``: values (B, Hkv, T, Dv);
- ``hook_score_terms``: ``ScoreTerms`` T1..T4 (B, Hq, T, T), unscaled,
  computed only when hooked and only without a cache (the cache keeps no raw keys); read-only: the
  scores that attention uses are q̂ᵀk̂, so patch ``hook_q_sheared``/``hook_k_sheared`` instead;
- ``hook_pattern``: the attention pattern (B, Hq, T, S), computed only when hooked; when hooked, the
  layer attends with the explicit pattern (the one the hook returns, if any) instead of SDPA;
- ``hook_out``: the attention output before the output projection (B, T, Hq * Dv).

Rotation and shear run as one pass (``psattn.ops.rope_shear``: a compiled kernel on CUDA for large
streams) unless ``hook_q``, ``hook_k`` or ``hook_score_terms`` sits between them; on every path the
standard shear computes 16-bit streams in float32 and rounds q̂ and k̂ once (``standard_shear``), so
a listening hook, the scored-queries path and a cache change no bit. The layer's ``backend`` other
than ``"auto"`` hands the uncached, unhooked full forward to ``psa_attention`` instead (``"fused"`` only
without padding or packed documents: its kernel knows the causal mask alone); a layer built with ``"fused"``
and a head width the kernel lacks (``psattn.ops.fused_widths.HEAD_DIMS``: 16, 32, 64, 128) is refused when built.

With ``scored`` (the positions whose output is needed, as when a model is trained on a few scored
positions), only those queries attend (``psattn.models.marked``). The hook points need every
row, so a hooked layer computes them all.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from psattn.models.config import AttentionConfig, check_dropout_rate, check_heads
from psattn.models.context import AttentionContext
from psattn.models.keylag import KEY_LAG
from psattn.models.marked import attend_marked
from psattn.models.scored import Scored, scored_of
from psattn.ops.attention import BACKENDS, ScoreTerms, attention_weights, expand_kv_heads, psa_attention
from psattn.ops.cache import LayerCache
from psattn.ops.fused_widths import check_fused_head_dim
from psattn.ops.hooks import HookPoint, active, add_hook_points
from psattn.ops.rope import RotaryEmbedding, apply_rope
from psattn.ops.rope_shear import rotated_and_sheared, wide_dtype
from psattn.ops.shear import momentum, shear

#: a shear function: (x, gamma, *, starts, prev, boundary) -> x̂ (B, H, T, D)
ShearFn = Callable[..., Tensor]


def __getattr__(name: str):
    """``check_scored``, now in ``psattn.models.scored``, with a DeprecationWarning, for one release."""
    if name == "check_scored":
        import warnings

        from psattn.models import scored

        warnings.warn("psattn.models.attention.check_scored is now psattn.models.scored.check_scored",
                      DeprecationWarning, stacklevel=2)
        return scored.check_scored
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class PhaseSpaceAttention(nn.Module):
    """Multi-head (or grouped-query) causal self-attention with the PSA shear."""

    # the hook points, set in __init__ by name
    hook_q: HookPoint
    hook_k: HookPoint
    hook_q_sheared: HookPoint
    hook_k_sheared: HookPoint
    hook_v: HookPoint
    hook_score_terms: HookPoint
    hook_pattern: HookPoint
    hook_out: HookPoint

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        attention: AttentionConfig | None = None,
        *,
        rope_base: float = 10000.0,
        rotary_fraction: float = 1.0,
        dropout: float = 0.0,
        head_dim: int | None = None,
        shear_fn: ShearFn = shear,
        backend: str = "auto",
    ):
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"unknown attention backend {backend!r}; expected one of {BACKENDS}")
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_heads(d_model, n_heads, n_kv_heads, head_dim, "head_dim")  # as ModelConfig checks them
        check_dropout_rate(dropout)
        if attention is not None and not isinstance(attention, AttentionConfig):
            raise TypeError(f"attention must be an AttentionConfig or None, got {type(attention).__name__}")
        self.config = attention or AttentionConfig()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = d_model // n_heads if head_dim is None else head_dim  # d_k: may differ from d_model / n_heads
        if backend == "fused":  # refused here, not at the first forward (the width does not change)
            check_fused_head_dim(self.head_dim)
        self.gamma_q, self.gamma_k = self.config.gammas
        self.post_rope = self.config.placement == "post_rope"
        self.boundary = self.config.boundary
        self.dropout = dropout
        # the shear (x, gamma, *, starts, prev, boundary) -> x + gamma (x - x_prev); another function of
        # that signature studies a different operator (psattn.theory.operators does)
        self.shear_fn = shear_fn
        # "auto": RoPE and the shear in one pass (psattn.ops.rope_shear), then SDPA; "fused", "sdpa",
        # "reference": rotate, then psa_attention with that backend, which shears itself (in the full,
        # uncached, unhooked forward, for "fused" without padding or packing: elsewhere the layer shears as "auto" does)
        self.backend = backend
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=False)
        self.rope = RotaryEmbedding(self.head_dim, rope_base, rotary_fraction)
        self.key_lag = None  # a learned key-lag baseline instead of the fixed shear
        if self.config.is_key_lag:
            self.key_lag = KEY_LAG[self.config.variant](n_heads, n_kv_heads, self.head_dim)
        add_hook_points(self)  # every point of psattn.ops.hooks.HOOKS

    def new_cache(self, max_rollback: int = 0) -> LayerCache:
        """An empty ``LayerCache`` for this layer (ValueError for a key-lag baseline, which has none)."""
        if self.key_lag is not None:
            raise ValueError(f"the key-lag baseline {self.config.variant!r} does not support cached decoding")
        return LayerCache(self.gamma_q != 0.0, self.gamma_k != 0.0, max_rollback)

    def _shear(self, x: Tensor, gamma: float, ctx: AttentionContext, prev: Tensor | None) -> Tensor:
        return self.shear_fn(x, gamma, starts=ctx.starts, prev=prev, boundary=self.boundary)

    @property
    def standard_shear(self) -> bool:
        """Whether the layer applies PSA's own shear to the rotated streams (post-RoPE placement, the
        library's shear function, no key-lag module after RoPE): then it rotates and shears 16-bit
        streams in float32 (``psattn.ops.rope_shear``) on every path, rounds q̂ and k̂ once, and keeps
        float32 raw rows in a cache; other layers compute in their input's dtype."""
        lag_after_rope = self.key_lag is not None and self.key_lag.site == "post_rope"
        return self.post_rope and self.shear_fn is shear and not lag_after_rope

    def rope_dtype(self, x: Tensor, stream: Tensor) -> torch.dtype:
        """The dtype the layer rotates (and shears) ``stream`` in, for the layer input ``x``."""
        return wide_dtype(stream.dtype) if self.standard_shear else x.dtype

    @property
    def local_queries(self) -> bool:
        """Whether q̂_t depends on ``x_t`` and ``x_{t-1}`` alone (the standard shear, no key-lag module that
        mixes queries), so that the queries of a few positions can be computed without the others."""
        mixed = self.key_lag is not None and self.key_lag.mixes_queries
        return not mixed and self.shear_fn is shear

    def forward(self, x: Tensor, context: AttentionContext | None = None, cache: LayerCache | None = None,
                scored: Tensor | Scored | None = None) -> Tensor:
        """x (B, T, d_model) -> (B, T, d_model); with ``scored`` (a (B, T) bool mask or its ``Scored``), the
        outputs of the scored positions alone: -> (N, d_model) in row-major order. Without ``context``, x is a
        plain batch (no padding, no packed documents) after the tokens ``cache`` holds, if any; a padded or packed
        batch needs ``build_context``'s."""
        self.check_input(x)
        if scored is not None:
            scored = scored_of(scored, tuple(x.shape[:2]), x.device)
        B, T, _ = x.shape
        # without a context: a plain batch, after the cached tokens (it was rotated and attended as if the cache
        # were empty: positions from 0, and is_causal let a decoded query see the first cached key alone)
        ctx = context or AttentionContext.continuing(0 if cache is None else len(cache), B, T, x.device)
        if self.key_lag is not None and cache is not None:
            raise ValueError(f"the key-lag baseline {self.config.variant!r} does not support cached decoding")
        if scored is not None and cache is None and not active(self) and scored.count:
            return self.o_proj(attend_marked(self, x, ctx, scored))  # (N, d_model): the scored positions alone
        if self.backend != "auto" and self._one_call(cache, ctx):
            out = self._attend_sheared_inside(x, ctx)  # (B, T, Hq * D)
        else:
            q_hat, k_hat, v = self._streams(x, ctx, cache)
            out = self._attend(q_hat, k_hat, v, ctx)  # (B, T, Hq * D)
        return self.o_proj(out if scored is None else scored.take(out))  # (B, T, d_model) or (N, d_model)

    def check_input(self, x: Tensor) -> None:
        """ValueError / TypeError naming the argument unless x is a floating-point (B, T, d_model) tensor."""
        d_model = self.q_proj.in_features
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 3 or x.shape[-1] != d_model:
            raise ValueError(f"x must be (B, T, d_model={d_model}), got shape {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")

    def _one_call(self, cache: LayerCache | None, ctx: AttentionContext) -> bool:
        """Whether shear and attention can be one ``psa_attention`` call: the standard post-RoPE shear,
        no cache, no key-lag module, no hook point between the shear and the output, and for the fused
        kernel, which knows the causal mask only, no padding or packed documents (no ``attn_mask``)."""
        between = (self.hook_q_sheared, self.hook_k_sheared, self.hook_score_terms, self.hook_pattern)
        masked = self.backend == "fused" and ctx.attn_mask is not None
        return (cache is None and self.post_rope and self.key_lag is None and self.shear_fn is shear
                and not masked and not any(hook.active for hook in between))

    def _one_pass(self) -> bool:
        """Whether RoPE and the shear can be one pass (``rotated_and_sheared``): the standard shear, with no
        hook point between the rotation and the shear."""
        between = (self.hook_q, self.hook_k, self.hook_score_terms)
        return self.standard_shear and not any(hook.active for hook in between)

    def _attend_sheared_inside(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        """x (B, T, d_model) -> (B, T, Hq * D) through ``psa_attention`` with the layer's ``backend``, which
        shears q and k itself (the fused kernel: inside its tiles)."""
        B, T, _ = x.shape
        q, k, v = self._project(x)
        cos, sin = ctx.rope_tables(self.rope, x.dtype)
        q, k, v = self.hook_q(apply_rope(q, cos, sin)), self.hook_k(apply_rope(k, cos, sin)), self.hook_v(v)
        out = psa_attention(
            q, k, v, gamma_q=self.gamma_q, gamma_k=self.gamma_k, attn_mask=ctx.attn_mask, is_causal=ctx.is_causal,
            dropout_p=self.dropout if self.training else 0.0, starts=ctx.starts, boundary=self.boundary,
            backend=self.backend,
        )  # (B, Hq, T, D)
        return self.hook_out(out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))  # (B, T, Hq * D)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, d_model) -> q (B, Hq, T, D), k and v (B, Hkv, T, D), before RoPE."""
        return (self.project_queries(x), *self.project_keys_values(x))

    def project_queries(self, x: Tensor) -> Tensor:
        """x (B, R, d_model) -> q (B, Hq, R, D), before RoPE."""
        B, R, _ = x.shape
        return self.q_proj(x).view(B, R, self.n_heads, self.head_dim).transpose(1, 2)  # (B, Hq, R, D)

    def project_keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, d_model) -> k and v (B, Hkv, T, D), before RoPE."""
        B, T, _ = x.shape
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        return k, v

    def _streams(self, x: Tensor, ctx: AttentionContext, cache: LayerCache | None) -> tuple[Tensor, Tensor, Tensor]:
        """q̂ (B, Hq, T, D), k̂ and v (B, Hkv, S, D) as attention sees them: projected, rotated and
        sheared (in the order the placement says), passed through the hook points, and, with a
        cache, k̂ and v extended by the cached ones."""
        q, k, v = self._project(x)
        if self.key_lag is not None and self.key_lag.site == "pre_rope":
            q, k, v = self.key_lag(q, k, v, ctx.starts)
        prev_q, prev_k = (None, None) if cache is None else cache.last_raw()
        dtype = q.dtype  # q̂ and k̂ leave in it (the standard shear computes in float32 for 16-bit streams)
        cos, sin = ctx.rope_tables(self.rope, self.rope_dtype(x, q))
        if self._one_pass():  # the shear acts on the rotated streams, in one pass with the rotation
            rotate = partial(rotated_and_sheared, cos=cos, sin=sin, starts=ctx.starts, boundary=self.boundary,
                             keep_rotated=cache is not None)  # the rotated streams: for a cache only
            raw_q, q_hat = rotate(q, gamma=self.gamma_q, prev=prev_q)
            raw_k, k_hat = rotate(k, gamma=self.gamma_k, prev=prev_k)
        elif self.post_rope:  # the shear acts on the rotated streams, with hook points (or a key lag) between
            q, k = apply_rope(q.to(cos.dtype), cos, sin), apply_rope(k.to(cos.dtype), cos, sin)
            if self.key_lag is not None and self.key_lag.site == "post_rope":
                q, k, v = self.key_lag(q, k, v, ctx.starts)
            q, k = self.hook_q(q), self.hook_k(k)
            raw_q, raw_k = q, k  # the streams the shear acts on
            q_hat = self._shear(raw_q, self.gamma_q, ctx, prev_q)
            k_hat = self._shear(raw_k, self.gamma_k, ctx, prev_k)
            if self.standard_shear:  # rounded once, as by the one pass
                q_hat, k_hat = q_hat.to(dtype), k_hat.to(dtype)
        else:  # ablation: shear first, then rotate
            raw_q, raw_k = q, k
            if self.hook_q.active or self.hook_k.active or self.hook_score_terms.active:
                q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
                patched_q, patched_k = self.hook_q(q), self.hook_k(k)
                if patched_q is not q:  # a replacement, in the rotated frame: rotate it back to shear it
                    q, raw_q = patched_q, apply_rope(patched_q, cos, -sin)
                if patched_k is not k:
                    k, raw_k = patched_k, apply_rope(patched_k, cos, -sin)
            q_hat = apply_rope(self._shear(raw_q, self.gamma_q, ctx, prev_q), cos, sin)
            k_hat = apply_rope(self._shear(raw_k, self.gamma_k, ctx, prev_k), cos, sin)
        q_hat, k_hat, v = self.hook_q_sheared(q_hat), self.hook_k_sheared(k_hat), self.hook_v(v)
        if self.hook_score_terms.active and cache is None:  # read-only: see the module docstring
            self.hook_score_terms.read(self._score_terms(raw_q, raw_k, q, k, ctx, cos, sin))
        if cache is not None:
            k_hat, v = cache.append(k_hat, v, raw_k=raw_k, raw_q=raw_q)  # (B, Hkv, S, D)
        return q_hat, k_hat, v

    def _attend(self, q_hat: Tensor, k_hat: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        """Causal attention of q̂ (B, Hq, T, D) over k̂, v (B, Hkv, S, D) -> (B, T, Hq * D), through
        ``hook_out``; with ``hook_pattern`` hooked, from the explicit (and possibly replaced) pattern."""
        B, _, T, _ = q_hat.shape
        dropout = self.dropout if self.training else 0.0
        if self.hook_pattern.active:
            pattern = attention_weights(q_hat, k_hat, attn_mask=ctx.attn_mask, is_causal=ctx.is_causal)
            pattern = F.dropout(self.hook_pattern(pattern), dropout)  # (B, Hq, T, S)
            out = pattern @ expand_kv_heads(v, self.n_heads)  # (B, Hq, T, D)
        else:
            out = F.scaled_dot_product_attention(
                q_hat, k_hat, v, attn_mask=ctx.attn_mask, is_causal=ctx.is_causal, dropout_p=dropout,
                enable_gqa=self.n_heads != self.n_kv_heads,
            )  # (B, Hq, T, D)
        return self.hook_out(out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))  # (B, T, Hq * D)

    def _score_terms(self, site_q, site_k, q, k, ctx, cos, sin) -> ScoreTerms:
        """T1..T4 with momenta taken where the shear acts (rotated afterwards for pre-RoPE), so that
        their sum is always q̂ᵀk̂."""
        p_q = momentum(site_q, starts=ctx.starts, boundary=self.boundary)
        p_k = momentum(site_k, starts=ctx.starts, boundary=self.boundary)
        if not self.post_rope:
            p_q, p_k = apply_rope(p_q, cos, sin), apply_rope(p_k, cos, sin)
        k, p_k = expand_kv_heads(k, self.n_heads), expand_kv_heads(p_k, self.n_heads)
        return ScoreTerms.from_streams(q, p_q, k, p_k, self.gamma_q, self.gamma_k)

