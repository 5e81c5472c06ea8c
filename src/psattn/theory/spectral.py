"""Spectral signature of the shear: closed-form transfer functions and a Bode plot measured on a model.

The shear ``x̂_t = (1 + gamma) x_t - gamma x_{t-1}`` is the causal two-tap filter

    H_gamma(z) = (1 + gamma) - gamma z^-1,   |H(e^{iω})|^2 = 1 + 2 gamma (1 + gamma)(1 - cos ω),

DC-neutral (H(1) = 1) and, for gamma > 0, high-pass with a monotone gain up to 1 + 2 gamma at the
Nyquist frequency ω = π. The score q̂_tᵀ k̂_j is a joint (two-dimensional) filter of the query and key
streams, H_q(z_q) H_k(z_k), of order (1 if gamma_q else 0, 1 if gamma_k else 0) in (z_q^-1, z_k^-1).
A Bode plot of the joint filter shows it on the diagonal ω_q = ω_k = ω, where it is ``H_q(e^{iω})
H_k(e^{iω})``: the response of the score to a query and a key carrying the same frequency.

Measured response (``measure_bode``). From the raw post-RoPE streams x and the sheared streams
x̂ that enter attention, read from a model's hook points (B, H, T, D), the estimate is the ratio of
their power spectra and the phase of their cross-spectrum,

    |Ĥ(ω)| = sqrt(<|X̂(ω)|^2> / <|X(ω)|^2>),   arg Ĥ(ω) = arg <X̂(ω) conj X(ω)>,

with X the Hann-windowed DFT along the sequence and <.> the mean over batch, heads and channels.
For the post-RoPE shear it recovers H up to window leakage and the sequence boundary, for any
weights: the shear is a fixed filter of whatever stream it reads, so the measurement checks the
implementation of the filter, not anything a model learned. Gain and phase are both compared: the gain
of the shear towards the next token, ``(1 + gamma) - gamma e^{+iω}``, is the closed form's, its phase the
opposite.
For the pre-RoPE ablation it does not. Seen after RoPE that shear is time-invariant too, but shifted
in frequency per RoPE pair: with y_t = R_t q_t and R_θ the pair's rotation by one position,

    R_t((1 + gamma) q_t - gamma q_{t-1}) = (1 + gamma) y_t - gamma R_θ y_{t-1},

so on the pair as a complex signal the gain is ``|(1 + gamma) - gamma e^{i(θ - ω)}|``: H moved by θ,
lowest (1) at ω = θ instead of at ω = 0. The estimate averages these shifted responses over pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from psattn.models.decoder import DecoderLM
from psattn.ops.hooks import capture
from psattn.ops.shear import check_gamma
from psattn.ops.variants import VARIANTS, variant_gammas


def shear_response(omega, gamma: float) -> np.ndarray:
    """``H_gamma(e^{iω}) = (1 + gamma) - gamma e^{-iω}`` (complex)."""
    gamma = check_gamma(gamma)
    omega = np.asarray(omega, dtype=float)
    return (1.0 + gamma) - gamma * np.exp(-1j * omega)


def shear_gain_squared(omega, gamma: float) -> np.ndarray:
    """``|H_gamma(e^{iω})|^2 = 1 + 2 gamma (1 + gamma)(1 - cos ω)``."""
    gamma = check_gamma(gamma)
    omega = np.asarray(omega, dtype=float)
    return 1.0 + 2.0 * gamma * (1.0 + gamma) * (1.0 - np.cos(omega))


def joint_response(omega_q, omega_k, gamma_q: float, gamma_k: float) -> np.ndarray:
    """The score filter ``H_q(e^{iω_q}) H_k(e^{iω_k})`` (broadcast over the two frequency arrays)."""
    gamma_q, gamma_k = check_gamma(gamma_q, "gamma_q"), check_gamma(gamma_k, "gamma_k")
    return shear_response(omega_q, gamma_q) * shear_response(omega_k, gamma_k)


def filter_order(gamma_q: float, gamma_k: float) -> tuple[int, int]:
    """Order of the joint score filter in (z_q^-1, z_k^-1): (0, 0) for plain attention."""
    gamma_q, gamma_k = check_gamma(gamma_q, "gamma_q"), check_gamma(gamma_k, "gamma_k")
    return (int(gamma_q != 0.0), int(gamma_k != 0.0))


@dataclass
class BodeCurves:
    """Complex frequency responses on ``omega`` (radians per token, 0..π)."""

    variant: str
    gamma: float
    omega: np.ndarray
    query: np.ndarray
    key: np.ndarray

    @property
    def joint(self) -> np.ndarray:
        """The score filter on the diagonal ω_q = ω_k."""
        return self.query * self.key

    @property
    def order(self) -> tuple[int, int]:
        return filter_order(*variant_gammas(self.variant, self.gamma))

    def to_dict(self) -> dict[str, Any]:
        """The curves as plain values, gains in dB, for JSON."""
        out: dict[str, Any] = {"variant": self.variant, "gamma": self.gamma, "order": list(self.order),
                               "omega": self.omega.tolist()}
        for name in ("query", "key", "joint"):
            h = getattr(self, name)
            out[f"{name}_gain_db"] = (20 * np.log10(np.abs(h))).tolist()
            out[f"{name}_phase"] = np.angle(h).tolist()
        return out


def variant_bode(variant: str, gamma: float, omega=None) -> BodeCurves:
    """Closed-form responses of a named variant (see ``psattn.ops.variants``)."""
    omega = np.linspace(0.0, np.pi, 257) if omega is None else np.asarray(omega, dtype=float)
    gamma_q, gamma_k = variant_gammas(variant, gamma)
    return BodeCurves(variant, gamma, omega, shear_response(omega, gamma_q), shear_response(omega, gamma_k))


def all_variant_bode(gamma: float, omega=None) -> list[BodeCurves]:
    """``variant_bode`` of every variant at ``gamma``."""
    return [variant_bode(v, gamma, omega) for v in VARIANTS]


def spectral_ratio(raw: Tensor, sheared: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(omega, Ĥ(ω)): the response estimate above from streams (B, H, T, D) along T."""
    if raw.shape != sheared.shape or raw.dim() != 4:
        raise ValueError(f"expected two (B, H, T, D) streams of one shape, got {tuple(raw.shape)} and {tuple(sheared.shape)}")
    T = raw.shape[2]
    if T < 4:
        raise ValueError(f"need at least 4 positions for a spectrum, got {T}")
    window = torch.hann_window(T, periodic=False, dtype=torch.float64)[:, None]  # (T, 1)
    X = torch.fft.rfft(raw.double() * window, dim=2)  # (B, H, F, D)
    Y = torch.fft.rfft(sheared.double() * window, dim=2)
    power_x = (X.abs() ** 2).mean(dim=(0, 1, 3))  # (F,)
    power_y = (Y.abs() ** 2).mean(dim=(0, 1, 3))
    cross = (Y * X.conj()).mean(dim=(0, 1, 3))
    gain = torch.sqrt(power_y / power_x.clamp_min(torch.finfo(torch.float64).tiny))
    response = gain * torch.exp(1j * torch.angle(cross))
    omega = 2 * np.pi * np.arange(X.shape[2]) / T
    return omega, response.numpy()


def _pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    if a.size < 2 or _flat(a) or _flat(b):
        return None  # undefined for a constant curve (gamma = 0, or the pure delay gamma = -1)
    return float(np.corrcoef(a, b)[0, 1])


def _flat(x: np.ndarray) -> bool:
    """Whether ``x`` is constant up to rounding: |e^{-iω}| (gamma = -1) spreads by 1e-16, and r came out as noise."""
    return bool(np.ptp(x) <= 1e-12 * np.abs(x).max())


STREAMS = ("query", "key", "joint")
#: a closed-form gain below this share of the largest one is a zero of H (rounding): no relative error there
ZERO_GAIN = 1e-9


def _check_stream(stream: str) -> None:
    """A ValueError for a stream other than query, key or joint (closed_form read any other name as the key's,
    measured raised an AttributeError)."""
    if stream not in STREAMS:
        raise ValueError(f"unknown stream {stream!r}; choose one of {STREAMS}")


@dataclass
class MeasuredBode:
    """Measured and closed-form responses of one layer's query and key streams."""

    layer: int
    gamma_q: float
    gamma_k: float
    omega: np.ndarray
    query: np.ndarray
    key: np.ndarray

    def closed_form(self, stream: str) -> np.ndarray:
        """The closed-form response of ``stream`` (query, key or joint) at the measured frequencies."""
        _check_stream(stream)
        if stream == "joint":
            return joint_response(self.omega, self.omega, self.gamma_q, self.gamma_k)
        return shear_response(self.omega, self.gamma_q if stream == "query" else self.gamma_k)

    def measured(self, stream: str) -> np.ndarray:
        """The measured response of ``stream``."""
        _check_stream(stream)
        return self.query * self.key if stream == "joint" else getattr(self, stream)

    def correlation(self, stream: str = "key") -> float | None:
        """Pearson r between measured and closed-form gain |H| (None when the latter is constant)."""
        return _pearson(np.abs(self.measured(stream)), np.abs(self.closed_form(stream)))

    def max_rel_error(self, stream: str = "key") -> float:
        """Largest relative error of the measured gain against the closed form, over the frequencies where the
        closed form is not 0 (above ``ZERO_GAIN`` of its largest gain): at a zero of H, such as γ = −1/2 at
        ω = π (x̂ the mean of a token's stream and its predecessor's), the relative error is undefined, and
        dividing by the rounding left there gave errors of 10¹⁴."""
        theory = np.abs(self.closed_form(stream))
        defined = theory > ZERO_GAIN * theory.max()
        measured = np.abs(self.measured(stream))[defined]
        return float(np.max(np.abs(measured - theory[defined]) / theory[defined]))

    def max_phase_error(self, stream: str = "key") -> float:
        """Largest difference, in radians (wrapped to [0, π]), between the measured and the closed-form phase, over
        the frequencies where the closed form is not 0 (its phase is undefined there). The gain alone cannot tell
        ``H(e^{iω})`` from its time reverse ``(1 + γ) − γ e^{+iω}``, a shear towards the next token, whose phase is
        the opposite: r and the relative error read it as the closed form."""
        theory = self.closed_form(stream)
        defined = np.abs(theory) > ZERO_GAIN * np.abs(theory).max()
        difference = np.angle(self.measured(stream)[defined] * np.conj(theory[defined]))  # wrapped to (-π, π]
        return float(np.max(np.abs(difference)))

    def to_dict(self, label: str = "") -> dict[str, Any]:
        """Curves and numbers for ``psattn.theory.plots.plot_measured_bode`` and JSON."""
        out: dict[str, Any] = {"label": label, **self.summary(), "omega": self.omega.tolist()}
        for s in ("query", "key"):
            out[f"{s}_measured_gain"] = np.abs(self.measured(s)).tolist()
            out[f"{s}_theory_gain"] = np.abs(self.closed_form(s)).tolist()
            out[f"{s}_measured_phase"] = np.angle(self.measured(s)).tolist()
            out[f"{s}_theory_phase"] = np.angle(self.closed_form(s)).tolist()
        return out

    def summary(self) -> dict[str, Any]:
        """Correlations, largest gain errors and largest phase errors of each stream, for JSON."""
        return {"layer": self.layer, "gamma_q": self.gamma_q, "gamma_k": self.gamma_k,
                **{f"{s}_r": self.correlation(s) for s in STREAMS},
                **{f"{s}_max_rel_error": self.max_rel_error(s) for s in STREAMS},
                **{f"{s}_max_phase_error": self.max_phase_error(s) for s in STREAMS}}


@torch.no_grad()
def measure_bode(model, input_ids: Tensor, layer: int = 0) -> MeasuredBode:
    """Estimate the query and key responses of attention layer ``layer`` of a
    ``DecoderLM`` from its hook points on ``input_ids`` (B, T), T ≥ 4. A ``model`` that is not a ``DecoderLM``
    is a TypeError; a layer it lacks, or fewer than 4 positions, a ValueError (the ids themselves are checked
    by the model's forward)."""
    if not isinstance(model, DecoderLM):  # an AttributeError on .blocks
        raise TypeError(f"measure_bode reads the hook points of a psattn DecoderLM, got {type(model).__name__}")
    blocks = model.blocks
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(blocks):
        raise ValueError(f"layer must lie in [0, {len(blocks)}), got {layer}")
    attn = blocks[layer].attn
    prefix = f"blocks.{layer}.attn."
    with capture(model, *(prefix + h for h in ("hook_q", "hook_k", "hook_q_sheared", "hook_k_sheared"))) as seen:
        model(input_ids)
    omega, h_q = spectral_ratio(seen[prefix + "hook_q"], seen[prefix + "hook_q_sheared"])
    _, h_k = spectral_ratio(seen[prefix + "hook_k"], seen[prefix + "hook_k_sheared"])
    return MeasuredBode(layer, attn.gamma_q, attn.gamma_k, omega, h_q, h_k)
