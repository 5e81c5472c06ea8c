"""Gauges are orthogonal and RoPE's relative rotation is G(s)ᵀG(t)."""

import math

import pytest
import torch

from psattn.meanfield.gauges import (
    generalised_rope_gauges,
    orthogonality_error,
    plane_rotation,
    random_orthogonal,
    rope_gauges,
    rope_relative_rotation,
)


def test_plane_rotation_turns_first_axis_towards_second():
    rot = plane_rotation(torch.tensor([math.pi / 2], dtype=torch.float64), 3, 0, 1)[0]
    assert torch.allclose(rot @ torch.tensor([1.0, 0, 0], dtype=torch.float64), torch.tensor([0, 1.0, 0], dtype=torch.float64))


def test_gauges_are_orthogonal():
    pos = torch.arange(10, dtype=torch.float64)
    assert orthogonality_error(rope_gauges(pos, 5, (1.0, 0.3))) < 1e-12
    assert orthogonality_error(generalised_rope_gauges(pos, 3, ((0, 1), (1, 2)), (1.0, 0.25))) < 1e-12
    assert orthogonality_error(random_orthogonal(7, 4, seed=3)) < 1e-12


def test_random_orthogonal_is_seeded():
    assert torch.equal(random_orthogonal(3, 3, seed=1), random_orthogonal(3, 3, seed=1))
    assert not torch.equal(random_orthogonal(3, 3, seed=1), random_orthogonal(3, 3, seed=2))


def test_rope_relative_rotation_is_gauge_product():
    pos = torch.tensor([0.0, 1.5, 4.0, 7.25], dtype=torch.float64)
    freqs = (1.0, 0.1)
    g = rope_gauges(pos, 4, freqs)  # (n, d, d)
    offsets = pos[None, :] - pos[:, None]  # (n, n): t − s
    direct = rope_relative_rotation(offsets, 4, freqs)  # (n, n, d, d)
    via_gauges = torch.einsum("iba,jbc->ijac", g, g)
    assert torch.allclose(direct, via_gauges, atol=1e-12)


def test_generalised_rope_with_shared_axis_is_not_translation_invariant():
    pos = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    g = generalised_rope_gauges(pos, 3, ((0, 1), (1, 2)), (1.0, 0.7))
    a01 = g[0].T @ g[1]
    a23 = g[2].T @ g[3]
    assert not torch.allclose(a01, a23, atol=1e-6)


def test_a_plane_rotation_needs_two_distinct_axes_of_the_space():
    """a == b wrote cos θ and −sin θ into one cell (a matrix that is not orthogonal); an axis beyond d an IndexError."""
    angles = torch.tensor([1.0], dtype=torch.float64)
    for a, b in ((1, 1), (0, 3), (-1, 0)):
        with pytest.raises(ValueError, match=f"plane \\({a}, {b}\\) is not a pair of distinct axes in d=3"):
            plane_rotation(angles, 3, a, b)
