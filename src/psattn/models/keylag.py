"""Key-lag baselines: other ways of giving one attention layer access to each key's predecessor
(arXiv 2609.32319). Unlike PSA they learn their mixing weights. Each acts on the (B, H, T, D) streams at
a fixed site: the lag-one mixers after RoPE (where PSA acts), the convolutions before it.

- ``smeared_keys`` (Olsson et al., 2022): ``k̂_j = σ(α_h) k_j + (1 − σ(α_h)) k_{j−1}``, one α per head.
- ``kv_shift`` (Xu et al., 2024): ``k̂_j = α₁ k_j + α₂ k_{j−1}``, ``v̂_j = β₁ v_j + β₂ v_{j−1}``, per head.
- ``primer_dconv`` (So et al., 2021): causal depthwise convolution, kernel 3, on q, k and v.
- ``canon`` (Allen-Zhu, 2025): x + causal depthwise convolution, kernel 4, on the concatenated q, k, v.

Boundaries: lag-one mixers use PSA's replicate rule (no predecessor at a sequence start, so
``x_{-1} := x_t``); the convolutions zero-pad at every sequence start like an ordinary causal
convolution. Neither ever reads across a sequence start. ``mixes_queries``: whether a module's
query at t depends on other positions (the layer projects only the queries it needs when none does).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from psattn.ops.shear import previous


def lagged(x: Tensor, lag: int, starts: Tensor | None) -> Tensor:
    """``x_{t-lag}`` (B, H, T, D), zero where t - lag falls before the start of t's sequence."""
    T = x.shape[2]
    shifted = torch.zeros_like(x)
    if lag < T:
        shifted[:, :, lag:] = x[:, :, : T - lag]
    if starts is None:
        return shifted
    index = torch.arange(T, device=x.device).expand_as(starts)  # (B, T)
    last_start = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values
    inside = (index - last_start >= lag)[:, None, :, None]  # (B, 1, T, 1)
    return shifted * inside


class SmearedKeys(nn.Module):
    """Olsson et al.'s smeared keys: each key mixed with its predecessor by a learned weight per head."""
    site = "post_rope"
    mixes_queries = False

    def __init__(self, n_heads: int, n_kv_heads: int, head_dim: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(n_kv_heads))  # σ(0) = 1/2: an even smear at start

    def forward(self, q, k, v, starts):
        """(q, k, v) with the keys smeared; q and v unchanged."""
        w = torch.sigmoid(self.alpha)[None, :, None, None]  # (1, Hkv, 1, 1)
        return q, w * k + (1 - w) * previous(k, starts=starts), v


class KVShift(nn.Module):
    """Xu et al.'s KV shift: keys and values each a learned mix of themselves and their predecessor."""
    site = "post_rope"
    mixes_queries = False

    def __init__(self, n_heads: int, n_kv_heads: int, head_dim: int):
        super().__init__()
        # (current, previous) weights per head, starting as plain attention
        self.key_weights = nn.Parameter(torch.tensor([1.0, 0.0]).repeat(n_kv_heads, 1))  # (Hkv, 2)
        self.value_weights = nn.Parameter(torch.tensor([1.0, 0.0]).repeat(n_kv_heads, 1))  # (Hkv, 2)

    def forward(self, q, k, v, starts):
        """(q, k, v) with keys and values shifted; q unchanged."""
        a, b = self.key_weights[None, :, None, :].unbind(-1)  # each (1, Hkv, 1)
        c, d = self.value_weights[None, :, None, :].unbind(-1)  # each (1, Hkv, 1)
        k = a[..., None] * k + b[..., None] * previous(k, starts=starts)
        v = c[..., None] * v + d[..., None] * previous(v, starts=starts)
        return q, k, v


class _DepthwiseCausalConv(nn.Module):
    """y_t = Σ_{i<K} w_i ⊙ x_{t-i} per channel, over a stream (B, H, T, D)."""

    def __init__(self, channels_shape: tuple[int, int], kernel: int, identity_init: bool):
        super().__init__()
        weight = torch.zeros(kernel, *channels_shape)  # (K, H, D)
        if identity_init:
            weight[0] = 1.0
        else:
            nn.init.uniform_(weight, -kernel ** -0.5, kernel ** -0.5)
        self.weight = nn.Parameter(weight)

    def forward(self, x: Tensor, starts: Tensor | None) -> Tensor:
        K, T = self.weight.shape[0], x.shape[2]
        if starts is None:  # t = 0 the only start: every lag is a view of one zero-padded copy
            padded = F.pad(x, (0, 0, K - 1, 0))  # (B, H, K - 1 + T, D)
            lag = lambda i: padded[:, :, K - 1 - i : K - 1 - i + T]  # noqa: E731
        else:
            lag = lambda i: lagged(x, i, starts)  # noqa: E731
        out = self.weight[0][None, :, None, :] * x  # w_0 (1, H, 1, D) ⊙ x (B, H, T, D)
        for i in range(1, K):
            out = out + self.weight[i][None, :, None, :] * lag(i)
        return out


class PrimerDConv(nn.Module):
    """So et al.'s Primer: a depthwise causal convolution (3 taps) on q, k and v before RoPE."""
    site = "pre_rope"
    mixes_queries = True

    def __init__(self, n_heads: int, n_kv_heads: int, head_dim: int):
        super().__init__()
        self.q_conv = _DepthwiseCausalConv((n_heads, head_dim), 3, identity_init=True)
        self.k_conv = _DepthwiseCausalConv((n_kv_heads, head_dim), 3, identity_init=True)
        self.v_conv = _DepthwiseCausalConv((n_kv_heads, head_dim), 3, identity_init=True)

    def forward(self, q, k, v, starts):
        """(q, k, v), each convolved along time within its sequence."""
        return self.q_conv(q, starts), self.k_conv(k, starts), self.v_conv(v, starts)


class CanonConv(nn.Module):
    """A Canon layer: one residual depthwise causal convolution over q, k and v together."""
    site = "pre_rope"
    mixes_queries = True

    def __init__(self, n_heads: int, n_kv_heads: int, head_dim: int):
        super().__init__()
        self.split = (n_heads, n_kv_heads, n_kv_heads)
        self.conv = _DepthwiseCausalConv((sum(self.split), head_dim), 4, identity_init=False)

    def forward(self, q, k, v, starts):
        """(q, k, v) plus their causal convolution along time."""
        qkv = torch.cat([q, k, v], dim=1)  # (B, Hq + 2 Hkv, T, D)
        qkv = qkv + self.conv(qkv, starts)
        return qkv.split(self.split, dim=1)  # (B, Hq, T, D), (B, Hkv, T, D), (B, Hkv, T, D)


KEY_LAG: dict[str, type[nn.Module]] = {
    "smeared_keys": SmearedKeys,
    "kv_shift": KVShift,
    "primer_dconv": PrimerDConv,
    "canon": CanonConv,
}
