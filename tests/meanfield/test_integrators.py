"""Integrators: stay on the sphere, RK4 converges at order 4 and Euler at order 1, β-aware step."""

import math

import pytest

from psattn.meanfield.config import KernelConfig, SimulationConfig
from psattn.meanfield.integrators import get_stepper, usa_step_size
from psattn.meanfield.simulate import simulate


def _final(integrator, dt, kernel="rope", dynamics="usa"):
    cfg = SimulationConfig(
        n=8, d=3, beta=1.0, kernel=KernelConfig(kernel), dynamics=dynamics, integrator=integrator,
        dt=dt, tau=2.0, beta_aware_step=False, batch=2, n_records=2,
    )
    return simulate(cfg).x


@pytest.mark.parametrize("kernel,dynamics", [("rope", "usa"), ("cosine_toeplitz", "sa")])
@pytest.mark.parametrize(
    "integrator,ref_dt,dts,ratio_range",
    [("rk4", 0.00625, (0.2, 0.1), (12.0, 22.0)), ("euler", 0.0125, (0.02, 0.01), (1.8, 2.2))],
    ids=["rk4_fourth_order", "euler_first_order"],
)
def test_convergence_order(integrator, ref_dt, dts, ratio_range, kernel, dynamics):
    """Halving dt divides the error against a fine RK4 run by 2^order (16 for RK4, 2 for Euler)."""
    ref = _final("rk4", ref_dt, kernel, dynamics)
    errors = [float((_final(integrator, dt, kernel, dynamics) - ref).norm()) for dt in dts]
    ratio = errors[0] / errors[1]
    assert ratio_range[0] < ratio < ratio_range[1], (errors, ratio)


@pytest.mark.parametrize("integrator", ["euler", "rk4"])
@pytest.mark.parametrize("dtype,tol", [("float64", 1e-13), ("float32", 1e-5)])
def test_particles_stay_on_the_sphere(integrator, dtype, tol):
    cfg = SimulationConfig(
        n=16, d=3, beta=2.0, kernel=KernelConfig("generalised_rope"), integrator=integrator, tau=5.0,
        dtype=dtype, batch=2, n_records=11, keep_states=True,
    )
    traj = simulate(cfg)
    assert traj.states is not None and traj.states.dtype == cfg.torch_dtype
    assert (traj.states.norm(dim=-1) - 1).abs().max() < tol


def test_usa_step_size_formula():
    assert usa_step_size(0.1, 0.25) == 0.1  # √β e^{β−1/2} < 1: step unchanged
    assert math.isclose(usa_step_size(0.1, 4.0), 0.1 / (2 * math.exp(3.5)))


def test_beta_aware_step_only_for_usa():
    usa = simulate(SimulationConfig(n=4, beta=2.0, tau=0.5, dt=0.1, n_records=2))
    sa = simulate(SimulationConfig(n=4, beta=2.0, tau=0.5, dt=0.1, dynamics="sa", n_records=2))
    assert usa.step_size <= usa_step_size(0.1, 2.0)
    assert math.isclose(sa.step_size, 0.1)
    assert math.isclose(float(usa.times[-1]), 0.5) and math.isclose(float(sa.times[-1]), 0.5)


def test_unknown_integrator_rejected():
    with pytest.raises(ValueError, match="unknown integrator"):
        get_stepper("leapfrog")
