"""LabelledKernel: symmetry of the pair matrices, co-moving frame, validation."""

import pytest
import torch

from psattn.meanfield import kernels
from psattn.meanfield.gauges import random_orthogonal

POS = list(range(6))
KERNELS = [
    kernels.plain_kernel(6, 3),
    kernels.rope_kernel(POS, 3, (1.0,)),
    kernels.generalised_rope_kernel(POS, 3, ((0, 1), (1, 2)), (1.0, 0.3)),
    kernels.cosine_toeplitz_kernel(POS, 3, 0.7),
    kernels.distance_bias_kernel(POS, 3, 0.5),
    kernels.prefix_kernel([0, 0, 1, 1, 2, 2], 3, 3, seed=0),
]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_pair_matrices_are_orthogonal_and_symmetric(kernel):
    a = kernel.pair_matrices()  # (n, n, d, d)
    eye = torch.eye(3, dtype=torch.float64)
    assert torch.allclose(a.transpose(-1, -2) @ a, eye.expand_as(a), atol=1e-12)
    assert torch.allclose(a.transpose(0, 1), a.transpose(-1, -2), atol=1e-12)  # A_ji = A_ijᵀ
    assert torch.allclose(kernel.label_factor, kernel.label_factor.T)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_comoving_round_trip(kernel):
    x = torch.randn(2, 6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(kernel.from_comoving(kernel.to_comoving(x)), x, atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_the_comoving_maps_name_a_batch_of_another_shape_or_dtype(kernel):
    """einsum's errors ("subscript i has size 4 ... does not broadcast", "expected scalar type Float but found
    Double") named neither the argument nor the shape it takes; the plain kernel returned any tensor as it was."""
    for convert in (kernel.to_comoving, kernel.from_comoving):
        for shape in ((2, 5, 3), (6, 3), (2, 6, 4)):
            with pytest.raises(ValueError, match=r"must be \(B, n=6, d=3\) for this kernel, got shape"):
                convert(torch.zeros(shape, dtype=torch.float64))
        with pytest.raises(TypeError, match=r"must be a torch.Tensor \(B, n=6, d=3\), got list"):
            convert([[0.0] * 3] * 6)
    if kernel.gauges is not None:
        cast = r"x is torch.float32, the kernel's gauges torch.float64: use kernel.to\(torch.float32\)"
        with pytest.raises(TypeError, match=cast):
            kernel.to_comoving(torch.zeros(2, 6, 3))
        assert kernel.to(torch.float32).to_comoving(torch.zeros(2, 6, 3)).dtype == torch.float32


def test_label_factor_values():
    one = torch.tensor(1.0, dtype=torch.float64)
    assert torch.allclose(kernels.cosine_toeplitz_kernel([0.0, 2.0], 3, 0.5).label_factor[0, 1], torch.cos(one))
    assert torch.allclose(kernels.distance_bias_kernel([0.0, 2.0], 3, 0.5).label_factor[0, 1], torch.exp(-one))


def test_prefix_gauge_shared_within_a_prompt():
    k = kernels.prefix_kernel([0, 1, 0, 1], 3, 2, seed=5)
    assert torch.equal(k.gauges[0], k.gauges[2])
    assert not torch.allclose(k.gauges[0], k.gauges[1])


def test_non_orthogonal_gauge_rejected():
    bad = torch.eye(3, dtype=torch.float64).repeat(2, 1, 1)
    bad[1, 0, 0] = 1.1
    with pytest.raises(ValueError, match="orthogonal"):
        kernels.gauge_kernel([0, 1], bad)


def test_asymmetric_pair_matrices_rejected():
    # A(s, t) = R(s) R(t) built directly from rotations about different axes: not symmetric (arXiv 2605.30229)
    rots = random_orthogonal(2, 3, seed=0)
    pairs = torch.einsum("iab,jbc->ijac", rots, rots)  # (2, 2, 3, 3): R_i R_j
    with pytest.raises(ValueError, match="A\\(ζ, ξ\\)"):
        kernels.pair_kernel(pairs)


def test_asymmetric_label_factor_rejected():
    with pytest.raises(ValueError, match="symmetric"):
        kernels.LabelledKernel(
            "x", 3, torch.zeros(2, dtype=torch.float64), torch.tensor([[1.0, 0.5], [0.2, 1.0]], dtype=torch.float64)
        )


def test_out_of_range_ids_are_named_briefly():
    """The error listed every label: one line of thousands of numbers at large n."""
    ids = [0.0] * 5000 + [7.0, 9.0, 0.5] * 3
    with pytest.raises(ValueError, match=r"integers in \[0, 4\); 9 of 5009 are not: 7, 9, 0.5, 7, 9, …$") as err:
        kernels.prefix_kernel(ids, 3, 4, seed=0)
    assert len(str(err.value)) < 120


def test_prompt_ids_must_be_in_range():
    with pytest.raises(ValueError, match="prompt ids"):
        kernels.prefix_kernel([0, 3], 3, 2, seed=0)


def test_non_finite_tables_are_refused():
    """NaN or inf gauges, pair matrices or label factors passed the tolerance checks (NaN > tol is False)
    and the run's states and energy came out NaN."""
    nan_gauges = torch.eye(2, dtype=torch.float64).repeat(1, 1, 1)
    nan_gauges[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="gauges must be finite"):
        kernels.gauge_kernel([0, 0], nan_gauges)
    inf_pairs = torch.eye(2, dtype=torch.float64).repeat(2, 2, 1, 1)
    inf_pairs[0, 1, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="pair matrices must be finite"):
        kernels.pair_kernel(inf_pairs)
    with pytest.raises(ValueError, match="label factor must be finite"):
        kernels.gauge_kernel([0, 0], torch.eye(2).repeat(1, 1, 1), torch.full((2, 2), float("nan")))
    with pytest.raises(ValueError, match="labels must be finite"):
        kernels.rope_kernel([0.0, float("nan")], 2, (1.0,))


def test_a_kernel_built_from_tensors_of_the_wrong_kind_is_refused_in_one_line():
    """A NumPy or integer label factor failed in torch.isfinite or torch.finfo; no labels failed in max() of an
    empty tensor; a (2, 2) table of labels and d = 0 were taken without a word."""
    labels, ones = torch.zeros(2, dtype=torch.float64), torch.ones(2, 2, dtype=torch.float64)
    with pytest.raises(TypeError, match="label factor must be a floating torch.Tensor, got ndarray"):
        kernels.LabelledKernel("x", 3, labels, ones.numpy())
    with pytest.raises(TypeError, match="label factor must be a floating torch.Tensor, got torch.int64"):
        kernels.LabelledKernel("x", 3, labels, ones.long())
    with pytest.raises(ValueError, match=r"labels must be one per token, \(n,\) with n ≥ 1, got shape \(0,\)"):
        kernels.rope_kernel([], 3, (1.0,))
    with pytest.raises(ValueError, match=r"labels must be one per token, \(n,\) with n ≥ 1, got shape \(2, 2\)"):
        kernels.LabelledKernel("x", 3, torch.zeros(2, 2, dtype=torch.float64), ones)
    with pytest.raises(ValueError, match="dimension d must be an integer ≥ 1, got 0"):
        kernels.rope_kernel([0.0, 1.0], 0, ())
    assert kernels.LabelledKernel("x", 3, torch.tensor([0, 1]), ones).n == 2  # integer labels (prompt ids) are fine


def test_a_float32_kernel_widens_to_float64():
    """A float32 run's kernel (Trajectory.kernel) cast to float64 was checked again at float64's tolerance: its
    gauges' float32 rounding (GᵀG − I of 5e-8) was refused as not orthogonal, and so was diagnose of float64 states
    with it, which casts the kernel to the states' dtype."""
    from psattn.meanfield.diagnostics import diagnose

    narrow = kernels.rope_kernel([float(s) for s in range(16)], 3, (0.7,)).to(torch.float32)
    wide = narrow.to(torch.float64)
    assert wide.gauges.dtype == wide.label_factor.dtype == torch.float64
    assert torch.equal(wide.gauges, narrow.gauges.double()) and torch.equal(wide.labels, narrow.labels)
    x = torch.nn.functional.normalize(torch.randn(1, 16, 3, dtype=torch.float64), dim=-1)
    assert torch.allclose(diagnose(x, narrow)["comoving_spread"], diagnose(x, wide)["comoving_spread"])
    big = kernels.gauge_kernel([0, 0], torch.eye(2).repeat(1, 1, 1), torch.full((2, 2), 1e39, dtype=torch.float64))
    with pytest.raises(ValueError, match="label factor must be finite"):  # narrowed, it is checked: 1e39 is inf
        big.to(torch.float32)
