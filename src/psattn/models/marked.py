"""Attention for a few marked query positions: the outputs a model needs when it is scored on a few
positions (the answer tokens of a task), at O(T) per marked query instead of O(T) for every row.

Keys and values still come from every position, and each marked query keeps the keys its own row of
the mask allows, so the result is exactly those rows of the full forward. When the query at t depends
on ``x_t`` and ``x_{t-1}`` alone (the layer's ``local_queries``), only the marked positions' queries,
and with a query shear their predecessors', are computed; otherwise every q̂ is, and the marked rows
are gathered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from psattn.models.context import AttentionContext
from psattn.models.scored import Scored
from psattn.ops.rope import RotaryEmbedding, apply_rope
from psattn.ops.shear import Boundary


class AttentionLayer(Protocol):
    """What this path reads of a ``psattn.models.attention.PhaseSpaceAttention`` layer."""

    n_heads: int
    n_kv_heads: int
    head_dim: int
    gamma_q: float
    gamma_k: float
    post_rope: bool
    boundary: Boundary
    dropout: float
    training: bool
    rope: RotaryEmbedding
    key_lag: Any  # a key-lag module (psattn.models.keylag) or None
    shear_fn: Callable[..., Tensor]

    @property
    def local_queries(self) -> bool:
        """Whether q̂_t depends on ``x_t`` and ``x_{t-1}`` alone."""

    @property
    def standard_shear(self) -> bool:
        """Whether q̂ and k̂ are computed in ``rope_dtype`` and rounded once to the stream's dtype."""

    def rope_dtype(self, x: Tensor, stream: Tensor) -> torch.dtype:
        """The dtype the layer rotates (and shears) ``stream`` in."""

    def project_queries(self, x: Tensor) -> Tensor:
        """x (B, R, d_model) -> q (B, Hq, R, D), before RoPE."""

    def project_keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, d_model) -> k and v (B, Hkv, T, D), before RoPE."""

    def _shear(self, x: Tensor, gamma: float, ctx: AttentionContext, prev: Tensor | None) -> Tensor: ...
    def _streams(self, x: Tensor, ctx: AttentionContext, cache: Any) -> tuple[Tensor, Tensor, Tensor]: ...


def attend_marked(layer: AttentionLayer, x: Tensor, ctx: AttentionContext, scored: Scored) -> Tensor:
    """The unhooked, uncached attention outputs (N, Hq * D) of ``layer`` at the positions ``scored``
    marks, in row-major order, from x (B, T, d_model)."""
    index = scored.first  # (B, Tq)
    B, Tq = index.shape
    rows_needed = Tq * (1 + (layer.gamma_q != 0.0))  # with a query shear, each query's predecessor too
    if layer.local_queries and 2 * rows_needed <= x.shape[1]:  # cheaper than every row
        q_sel = marked_queries(layer, x, ctx, index)  # (B, Hq, Tq, D)
        k_hat, v = keys_values(layer, x, ctx)
    else:  # every q̂, then a gather
        q_hat, k_hat, v = layer._streams(x, ctx, None)
        at = index[:, None, :, None].expand(B, layer.n_heads, Tq, layer.head_dim)  # (B, Hq, Tq, D)
        q_sel = q_hat.gather(2, at)  # (B, Hq, Tq, D)
    return attend_from(layer, scored, q_sel, k_hat, v, ctx)


def keys_values(layer: AttentionLayer, x: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
    """k̂ and v (B, Hkv, T, D) of every position, for a layer whose queries are computed apart."""
    k, v = layer.project_keys_values(x)  # (B, Hkv, T, D) each
    dtype = k.dtype
    cos, sin = ctx.rope_tables(layer.rope, layer.rope_dtype(x, k))
    if not layer.post_rope:  # ablation: shear first, then rotate
        return apply_rope(layer._shear(k, layer.gamma_k, ctx, None), cos, sin), v
    k = apply_rope(k.to(cos.dtype), cos, sin)
    if layer.key_lag is not None:  # one that does not mix queries (else this path is not taken)
        _, k, v = layer.key_lag(None, k, v, ctx.starts)
    k_hat = layer._shear(k, layer.gamma_k, ctx, None)
    return (k_hat.to(dtype) if layer.standard_shear else k_hat), v  # rounded once, as the full forward does


def marked_queries(layer: AttentionLayer, x: Tensor, ctx: AttentionContext, index: Tensor) -> Tensor:
    """q̂ (B, Hq, Tq, D) at the positions ``index`` (B, Tq) alone, from x at those positions and, with a
    query shear, at the positions before them: each (previous, current) pair is sheared as a two-token
    stream that starts at its first token, and again at its second when that is a sequence start, so
    the boundary rule is the stream's own."""
    B, Tq = index.shape
    paired = layer.gamma_q != 0.0
    rows = torch.cat([(index - 1).clamp(min=0), index], 1) if paired else index  # (B, R): R = 2 Tq or Tq
    x_rows = x.gather(1, rows[..., None].expand(*rows.shape, x.shape[-1]))  # (B, R, d_model)
    q = layer.project_queries(x_rows)  # (B, Hq, R, D)
    dtype = q.dtype
    cos, sin = layer.rope(ctx.position_ids.gather(1, rows), layer.rope_dtype(x, q))  # (B, 1, R, r)
    if layer.post_rope:
        q = apply_rope(q.to(cos.dtype), cos, sin)
    if paired:
        starts = index == 0 if ctx.starts is None else ctx.starts.gather(1, index)  # (B, Tq)
        pairs = q.unflatten(2, (2, Tq)).permute(0, 3, 1, 2, 4).flatten(0, 1)  # (B Tq, Hq, 2, D)
        pair_starts = torch.stack([torch.ones_like(starts), starts], -1).flatten(0, 1)  # (B Tq, 2)
        sheared = layer.shear_fn(pairs, layer.gamma_q, starts=pair_starts, boundary=layer.boundary)  # (B Tq, Hq, 2, D)
        q = sheared[:, :, 1].unflatten(0, (B, Tq)).transpose(1, 2)  # (B, Hq, Tq, D)
    if not layer.post_rope:
        q = apply_rope(q, cos[:, :, -Tq:], sin[:, :, -Tq:])
    return q.to(dtype) if layer.standard_shear else q  # rounded once, as the full forward does


def attend_from(layer: AttentionLayer, scored: Scored, q_sel: Tensor, k_hat: Tensor, v: Tensor,
                ctx: AttentionContext) -> Tensor:
    """Attention outputs (N, Hq * D) of the gathered queries q_sel (B, Hq, Tq, D) at the positions
    ``scored.first`` (B, Tq), of which ``scored.filled`` are marked, in row-major order: each gathered query
    keeps the keys its own row of the mask allows."""
    index = scored.first  # (B, Tq)
    B, Hq, Tq, D = q_sel.shape
    T = k_hat.shape[2]
    if ctx.attn_mask is None:  # causal: a query at position p sees keys 0..p
        mask = (torch.arange(T, device=q_sel.device) <= index[:, :, None])[:, None]  # (B, 1, Tq, T)
    else:
        full = ctx.attn_mask.expand(B, 1, T, ctx.attn_mask.shape[-1])  # (B, 1, T, S)
        mask = full.gather(2, index[:, None, :, None].expand(B, 1, Tq, full.shape[-1]))  # (B, 1, Tq, S)
    out = F.scaled_dot_product_attention(
        q_sel, k_hat, v, attn_mask=mask, dropout_p=layer.dropout if layer.training else 0.0,
        enable_gqa=layer.n_heads != layer.n_kv_heads,
    )  # (B, Hq, Tq, D)
    return scored.take_filled(out.transpose(1, 2).reshape(B, Tq, Hq * D))  # (B, Tq, Hq * D) -> (N, Hq * D)
