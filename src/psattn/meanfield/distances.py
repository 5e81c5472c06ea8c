"""Distances between probability laws on the circle and on the sphere (for the universality checks).

- ``circle_w1``: the exact Wasserstein-1 distance on the circle R/2πZ (arc-length metric) between two
  discrete laws, via ``W1 = min_c ∫_0^{2π} |F_μ(θ) − F_ν(θ) − c| dθ`` (the minimising c is a weighted
  median of F_μ − F_ν). A continuous law enters through ``CircleLaw.discretise`` (cell midpoints).
- ``energy_distance``: the energy distance with the chordal metric of R^d,
  D(P, Q)² = 2 E‖X − Y‖ − E‖X − X′‖ − E‖Y − Y′‖, a metric on laws of ``S^{d−1}`` (V-statistics of the
  given weighted samples). Each ‖x − y‖ is the norm of the difference, accurate to rounding for near points
  as well (the expansion ‖x‖² + ‖y‖² − 2⟨x, y⟩ cancels to rounding noise there, and read 0 for two points
  1e-9 apart, up to 7e-6 for clouds a rounding error apart). What is left is inherent: D is the root of a sum of O(1) terms that
  cancel to a few eps, so D is accurate to about eps / D, and one law given twice reads up to a few √eps
  (3e-8).
- ``coupling_w1_bound``: mean geodesic distance between paired points, an upper bound on the
  Wasserstein-1 distance between two n-point empirical laws (the identity coupling).

>>> import numpy as np
>>> round(circle_w1(np.array([0.0]), None, np.array([np.pi]), None), 6) == round(np.pi, 6)
True
"""

from __future__ import annotations

import numpy as np

TWO_PI = 2.0 * np.pi


def _points(values, name: str, ndim: int) -> np.ndarray:
    """``values`` as a float64 array of ``ndim`` dimensions holding at least one point, all finite; a
    ValueError naming ``name`` otherwise (NaN gave NaN or an IndexError, no points a ZeroDivisionError)."""
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != ndim or a.shape[0] == 0 or not np.isfinite(a).all():
        shape = "(n,)" if ndim == 1 else "(n, d)"
        raise ValueError(f"{name} must be {shape} finite numbers with n >= 1, got shape {a.shape}")
    return a


def _weights(points: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    if weights is None:
        return np.full(points.shape[0], 1.0 / points.shape[0])
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != points.shape[:1] or (w < 0).any() or not np.isfinite(w).all() or not w.sum() > 0:
        raise ValueError("weights must be finite, non-negative, one per point, with a positive sum")
    return w / w.sum()


def circle_w1(
    angles_a: np.ndarray, weights_a: np.ndarray | None, angles_b: np.ndarray, weights_b: np.ndarray | None
) -> float:
    """Exact W1 on the unit circle between ``Σ a_i δ_{θ_i}`` and ``Σ b_j δ_{φ_j}``; angles in radians (any range)."""
    a = np.mod(_points(np.asarray(angles_a, dtype=np.float64).reshape(-1), "angles_a", 1), TWO_PI)  # (n,)
    b = np.mod(_points(np.asarray(angles_b, dtype=np.float64).reshape(-1), "angles_b", 1), TWO_PI)  # (m,)
    wa, wb = _weights(a, weights_a), _weights(b, weights_b)
    points = np.concatenate([a, b])  # (n + m,)
    signed = np.concatenate([wa, -wb])
    order = np.argsort(points, kind="stable")
    points, signed = points[order], signed[order]
    diff = np.cumsum(signed)  # F_a − F_b on [points[k], points[k+1])
    lengths = np.diff(np.append(points, points[0] + TWO_PI))  # the last cell wraps around
    keep = lengths > 0
    diff, lengths = diff[keep], lengths[keep]
    order = np.argsort(diff)
    cumulative = np.cumsum(lengths[order])
    c = diff[order][np.searchsorted(cumulative, 0.5 * cumulative[-1])]  # weighted median
    return float(np.sum(lengths * np.abs(diff - c)))


def energy_distance(
    points_a: np.ndarray,
    points_b: np.ndarray,
    weights_a: np.ndarray | None = None,
    weights_b: np.ndarray | None = None,
) -> float:
    """Chordal energy distance between two weighted point clouds (n, d) and (m, d); distances from the differences
    of the points, so that near points count in full (``distances``)."""
    a, b = _points(points_a, "points_a", 2), _points(points_b, "points_b", 2)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the two clouds must live in one dimension d, got {a.shape[1]} and {b.shape[1]}")
    wa, wb = _weights(a, weights_a), _weights(b, weights_b)
    d2 = 2.0 * _mean_distance(a, wa, b, wb) - _mean_distance(a, wa, a, wa) - _mean_distance(b, wb, b, wb)
    return float(np.sqrt(max(d2, 0.0)))


def _mean_distance(x: np.ndarray, wx: np.ndarray, y: np.ndarray, wy: np.ndarray, block: int = 1 << 22) -> float:
    """Σ_ij wx_i wy_j ‖x_i − y_j‖ for x (n, d), y (m, d), in row blocks of about ``block`` pairs."""
    rows = max(1, block // y.shape[0])
    total = 0.0
    for start in range(0, x.shape[0], rows):
        part = x[start : start + rows]  # (r, d)
        squares = np.zeros((part.shape[0], y.shape[0]))  # (r, m): Σ_k (x_ik − y_jk)², one coordinate at a time
        for k in range(x.shape[1]):
            squares += np.square(part[:, k, None] - y[None, :, k])
        total += float(wx[start : start + rows] @ np.sqrt(squares) @ wy)
    return total


def coupling_w1_bound(points_a: np.ndarray, points_b: np.ndarray) -> float:
    """mean_i arccos⟨a_i, b_i⟩ for paired unit vectors (n, d): ≥ W1 of the two empirical laws."""
    a, b = _points(points_a, "points_a", 2), _points(points_b, "points_b", 2)
    if a.shape != b.shape:
        raise ValueError(f"paired point sets must have the same shape, got {a.shape} and {b.shape}")
    # 2 arcsin(‖a − b‖/2) is the geodesic distance, accurate also for nearly equal points
    return float(np.mean(2.0 * np.arcsin(np.clip(np.linalg.norm(a - b, axis=1) / 2.0, 0.0, 1.0))))
