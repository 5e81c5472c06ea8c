"""Certificates of the shear as a filter: joint filter orders and the induction separation, DC and
high-pass gains, causality, the RoPE placement (Coriolis) corollary, and the INT8 headroom bound."""

from __future__ import annotations

import numpy as np
import sympy as sp
import torch
import torch.nn.functional as F

from psattn.ops.hooks import capture
from psattn.ops.rope import apply_rope
from psattn.ops.shear import shear as library_shear
from psattn.ops.variants import VARIANTS, variant_gammas
from psattn.theory.certificates.base import Evidence, certificate, operator_free
from psattn.theory.operators import REFERENCE, OperatorUnderTest
from psattn.theory.probe import probe_taps
from psattn.theory.spectral import filter_order

DIM = 8

# Two sequences whose query (last position, token a, preceded by c) is the same. In S1 the target
# (the token after the previous a) is b at offset -3 and c at offset -1 is a distractor; in S2 the
# roles swap: c at offset -1 is the target, b at offset -3 a distractor.
TOKENS = {"a": 0, "b": 1, "c": 2, "x": 3, "y": 4}
INSTANCE = {"S1": ("abxca", 1, 3), "S2": ("ybaca", 3, 1)}  # sequence, target, distractor


def _instance_margins(op: OperatorUnderTest, gamma_q: float, gamma_k: float) -> dict[str, float]:
    """Target score minus the best other key, per sequence, for one-hot embeddings k = e(token),
    queries q = -e(token) (the readout matching H's negative tap)."""
    margins = {}
    for name, (seq, target, _) in INSTANCE.items():
        k = torch.zeros(1, 1, len(seq), DIM, dtype=torch.float64)
        for t, tok in enumerate(seq):
            k[0, 0, t, TOKENS[tok]] = 1.0
        q_hat, k_hat = op.sheared(-k, gamma_q), op.sheared(k, gamma_k)
        scores = (k_hat[0, 0] @ q_hat[0, 0, -1]).tolist()  # the last query against every key
        margins[name] = scores[target] - max(s for j, s in enumerate(scores) if j != target)
    return margins


@certificate(
    "filter_order_gap",
    "the joint score filter has order (0,0) for plain attention and (1,1) for PSA ((0,1) key-only, "
    "(1,0) query-only); induction needs key-side order >= 1: a pair of sequences no score of key-side "
    "order 0 can separate, which the key-side order-1 score separates",
    "symbolic + numeric",
)
def filter_order_gap(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check the score filter's orders and the induction separation (the statement above)."""
    for variant in VARIANTS:
        gq, gk = variant_gammas(variant, 0.5)
        taps = [probe_taps(op, g, DIM) for g in (gq, gk)]
        orders = tuple(t.order if set(t.taps) <= {0, 1} else f"acausal lags {t.lags}" for t in taps)
        ev.check(orders == filter_order(gq, gk),
                 f"operator, {variant}: joint order {orders}, expected {filter_order(gq, gk)}")

    # Symbolic: a key-side order-0 score sees each key only as (token, offset) (plus the query side,
    # which is identical in S1 and S2), so S1's target is S2's distractor and vice versa.
    feats: dict[str, dict[str, tuple[str, int | str]]] = {}
    for name, (seq, target, distractor) in INSTANCE.items():
        t = len(seq) - 1
        previous_a = max(j for j in range(t) if seq[j] == seq[t])
        ev.check(previous_a + 1 == target and seq.count(seq[t]) == 2,
                 f"{name} = {seq!r}: the target (after the previous {seq[t]!r}) is position {target}")
        feats[name] = {role: (seq[j], j - t) for role, j in (("target", target), ("distractor", distractor))}
        feats[name]["query"] = (seq[t], seq[t - 1])
    ev.check(feats["S1"]["query"] == feats["S2"]["query"] and feats["S1"]["target"] == feats["S2"]["distractor"]
             and feats["S1"]["distractor"] == feats["S2"]["target"],
             f"the query side and the (token, offset) features coincide with roles swapped: {feats}")
    f = sp.Function("f")
    m1 = f(*feats["S1"]["target"]) - f(*feats["S1"]["distractor"])
    m2 = f(*feats["S2"]["target"]) - f(*feats["S2"]["distractor"])
    ev.check(sp.simplify(m1 + m2) == 0,
             "symbolic: for every order-0 key score f, margin(S1) + margin(S2) = 0, so both cannot be > 0")

    m_key = _instance_margins(op, 0.0, 0.5)
    ev.check(min(m_key.values()) > 0,
             f"operator, key-only γ=0.5: margins {m_key} are positive in both sequences (the shear gives γ)")
    for variant in ("baseline", "query_only"):
        m = _instance_margins(op, *variant_gammas(variant, 0.5))
        ev.check(abs(sum(m.values())) < 1e-12 and min(m.values()) <= 0,
                 f"operator, {variant}: margins {m} sum to 0: no separation")


@certificate(
    "dc_neutral_high_pass",
    "H(z) = (1+γ) - γ z⁻¹ has H(1) = 1 (DC-neutral, also at the sequence start) and, for γ > 0, a gain "
    "|H(e^{iω})|² = 1 + 2γ(1+γ)(1 - cos ω) rising monotonically to 1 + 2γ at ω = π",
    "symbolic + numeric",
)
def dc_neutral_high_pass(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check that the shear filter is DC-neutral and high-pass (the statement above)."""
    gamma = sp.Symbol("gamma", positive=True)
    omega = sp.Symbol("omega", real=True)
    H = (1 + gamma) - gamma * sp.exp(-sp.I * omega)
    gain2 = sp.expand_complex(H * sp.conjugate(H))
    ev.check(sp.simplify(H.subs(omega, 0) - 1) == 0, "symbolic: H(1) = 1")
    ev.check(sp.simplify(gain2 - (1 + 2 * gamma * (1 + gamma) * (1 - sp.cos(omega)))) == 0,
             "symbolic: |H|² = 1 + 2γ(1+γ)(1 - cos ω)")
    ev.check(sp.simplify(sp.diff(gain2, omega) - 2 * gamma * (1 + gamma) * sp.sin(omega)) == 0,
             "symbolic: d|H|²/dω = 2γ(1+γ) sin ω >= 0 on [0, π]: monotone high-pass")
    ev.check(sp.simplify(sp.sqrt(sp.factor(gain2.subs(omega, sp.pi))) - (1 + 2 * gamma)) == 0,
             "symbolic: |H(-1)| = 1 + 2γ")

    T = 16
    t = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    v = torch.linspace(-1.0, 2.0, DIM, dtype=torch.float64)  # (D,)
    for g in (0.5, 1.5):
        for label, omega_v in (("DC", 0.0), ("ω = π/3", np.pi / 3), ("Nyquist", np.pi)):
            x = (torch.cos(omega_v * t) * v)[None, None]  # (1, 1, T, D)
            h = (1 + g) - g * np.exp(-1j * omega_v)
            expected = (torch.cos(omega_v * t + float(np.angle(h))) * abs(h) * v)[None, None]
            got = op.sheared(x, g)
            first = 0 if omega_v == 0.0 else 1  # the boundary rule keeps DC at t = 0 too
            err = (got - expected)[..., first:, :].abs().max().item()
            ev.check(err < 1e-12, f"operator, γ={g}, {label}: output = |H| = {abs(h):.4g} times the input, "
                                  f"phase {np.angle(h):.4g} (error {err:.1e})")


@certificate(
    "causality",
    "changing anything at position s never changes the sheared streams, the attention output or the "
    "model's logits at positions t < s",
    "numeric",
)
def causality(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check causality (the statement above)."""
    T, s = 12, 7
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, T, DIM, generator=g, dtype=torch.float64) for _ in range(3))
    bumped = [x.clone() for x in (q, k, v)]
    for x in bumped:
        x[:, :, s] += 1.0
    for name, a, b in (("q̂", q, bumped[0]), ("k̂", k, bumped[1])):
        diff = (op.sheared(a, 0.8) - op.sheared(b, 0.8))[:, :, :s].abs().max().item()
        ev.check(diff == 0, f"operator: {name} at t < {s} unchanged (max change {diff:.1e})")

    def attend(q, k, v):
        return F.scaled_dot_product_attention(op.sheared(q, 0.8), op.sheared(k, 0.8), v, is_causal=True)

    diff = (attend(q, k, v) - attend(*bumped))[:, :, :s].abs().max().item()
    ev.check(diff < 1e-14, f"operator: attention output at t < {s} unchanged (max change {diff:.1e})")

    model = op.build_model("symmetric", 0.8)
    ids = torch.randint(0, model.config.vocab_size, (2, T), generator=g)
    ids2 = ids.clone()
    ids2[:, s] = (ids2[:, s] + 1) % model.config.vocab_size
    with torch.no_grad():
        a, b = model(ids), model(ids2)
    before, after = (a - b)[:, :s].abs().max().item(), (a - b)[:, s:].abs().max().item()
    ev.check(before < 1e-12 and after > 1e-6,
             f"operator model: logits at t < {s} unchanged ({before:.1e}), at t >= {s} changed ({after:.1e})")


@operator_free
def _coriolis_derivation(ev: Evidence) -> None:
    """The Coriolis term and its norm, symbolically."""
    theta, t, gamma = sp.symbols("theta t gamma", real=True)
    R = lambda phi: sp.Matrix([[sp.cos(phi), -sp.sin(phi)], [sp.sin(phi), sp.cos(phi)]])  # noqa: E731
    qt, qp = sp.Matrix(sp.symbols("u0:2", real=True)), sp.Matrix(sp.symbols("w0:2", real=True))
    post = (1 + gamma) * R(t * theta) * qt - gamma * R((t - 1) * theta) * qp
    pre = R(t * theta) * ((1 + gamma) * qt - gamma * qp)
    coriolis = gamma * (R((t - 1) * theta) - R(t * theta)) * qp
    ev.check(sp.simplify(pre - post - coriolis) == sp.zeros(2, 1), "symbolic: pre - post = γ (R_{t-1} - R_t) q_{t-1}")
    norm2 = sp.trigsimp(sp.expand((coriolis.T * coriolis)[0]))
    expected = 4 * gamma**2 * sp.sin(theta / 2) ** 2 * (qp.T * qp)[0]
    ev.check(sp.simplify(sp.expand_trig(norm2 - expected)) == 0,
             "symbolic: |pre - post|² = 4γ² sin²(θ/2) |q_{t-1}|², zero only if γ = 0, θ ∈ 2πℤ or q_{t-1} = 0")


@certificate(
    "coriolis_placement",
    "the shear acts after RoPE; applying it before RoPE differs by the Coriolis term "
    "pre - post = γ (R_{t-1} - R_t) q_{t-1}, of norm 2|γ sin(θ/2)| |q_{t-1}| per rotating pair: non-zero",
    "symbolic + numeric",
)
def coriolis_placement(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check the Coriolis term of the pre-RoPE placement (the statement above)."""
    _coriolis_derivation(ev)

    gamma_v, T = 0.8, 10
    ids = torch.randint(0, 37, (2, T), generator=torch.Generator().manual_seed(4))
    names = ["blocks.0.attn.hook_" + n for n in ("q", "k", "q_sheared", "k_sheared")]
    model = op.build_model("symmetric", gamma_v, n_layers=1)
    with torch.no_grad(), capture(model, *names) as seen:
        model(ids)
    for stream in ("q", "k"):
        raw, sheared = seen[f"blocks.0.attn.hook_{stream}"], seen[f"blocks.0.attn.hook_{stream}_sheared"]
        err = (sheared - library_shear(raw, gamma_v)).abs().max().item()
        ev.check(err < 1e-12, f"operator model: {stream}̂ is the post-RoPE shear of {stream} (max deviation {err:.1e})")

    # The counterfactual on the library's models, same weights: measured pre - post vs the closed form.
    post_m = REFERENCE.build_model("symmetric", gamma_v, n_layers=1)
    pre_m = OperatorUnderTest("pre", "", placement="pre_rope").build_model("symmetric", gamma_v, n_layers=1)
    sheared = {}
    for label, m in (("post", post_m), ("pre", pre_m)):
        with torch.no_grad(), capture(m, "blocks.0.attn.hook_q_sheared") as seen:
            m(ids)
        sheared[label] = seen["blocks.0.attn.hook_q_sheared"]
    attn = post_m.blocks[0].attn
    with torch.no_grad():
        x = post_m.blocks[0].norm_attn(post_m.embed(ids))
        q_raw = attn.q_proj(x).view(2, T, attn.n_heads, attn.head_dim).transpose(1, 2)  # (B, H, T, D) pre-RoPE
        cos, sin = attn.rope(torch.arange(T).expand(2, T), x.dtype)
    q_prev = torch.cat([q_raw[:, :, :1], q_raw[:, :, :-1]], dim=2)  # q_{t-1}; replicate at t = 0
    cos_prev, sin_prev = torch.cat([cos[:, :, :1], cos[:, :, :-1]], 2), torch.cat([sin[:, :, :1], sin[:, :, :-1]], 2)
    closed = gamma_v * (apply_rope(q_prev, cos_prev, sin_prev) - apply_rope(q_prev, cos, sin))
    measured = sheared["pre"] - sheared["post"]
    err = (measured - closed).abs().max().item()
    size = measured.norm().item() / sheared["post"].norm().item()
    ev.check(err < 1e-10 and size > 1e-3,
             f"library models: pre - post matches the closed form (error {err:.1e}) and is non-zero "
             f"(|pre - post| / |post| = {size:.3f})")


@certificate(
    "int8_headroom",
    "|k̂|∞ <= (1 + 2γ)|k|∞ for γ >= 0, with equality attained (an alternating stream), so the sheared "
    "keys need at most log2(1 + 2γ) more bits of INT8 range",
    "symbolic + numeric",
)
def int8_headroom(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check the sheared keys' INT8 headroom (the statement above)."""
    gamma = sp.Symbol("gamma", nonnegative=True)
    ev.check(sp.simplify(sp.Abs(1 + gamma) + sp.Abs(-gamma) - (1 + 2 * gamma)) == 0,
             "symbolic: the ∞-norm gain of the taps (1+γ, -γ) is |1+γ| + |γ| = 1 + 2γ for γ >= 0")
    g = torch.Generator().manual_seed(5)
    T = 16
    alternating = torch.tensor([(-1.0) ** i for i in range(T)], dtype=torch.float64)[None, None, :, None]
    alternating = alternating * torch.ones(1, 1, T, DIM, dtype=torch.float64)
    for gv in (0.25, 0.5, 1.0, 2.0):
        taps = probe_taps(op, gv, DIM)
        gain = np.abs(np.concatenate([taps.tap(lag) for lag in taps.lags], axis=1)).sum(axis=1).max()
        bound = 1 + 2 * gv
        ev.check(abs(gain - bound) < 1e-9,
                 f"operator, γ={gv}: ∞-norm gain {gain:.6g} = 1 + 2γ = {bound:g} ({np.log2(bound):.3f} bits)")
        attained = op.sheared(alternating, gv)[..., 1:, :].abs().max().item()
        x = torch.randn(64, 2, T, DIM, generator=g, dtype=torch.float64)
        ratio = (op.sheared(x, gv).abs().amax(dim=(2, 3)) / x.abs().amax(dim=(2, 3))).max().item()
        ev.check(abs(attained - bound) < 1e-12 and ratio <= bound + 1e-12,
                 f"operator, γ={gv}: attained {attained:.6g} on an alternating stream; random streams reach {ratio:.4g}")
