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
def test_rk4_is_fourth_order(kernel, dynamics):
    ref = _final("rk4", 0.00625, kernel, dynamics)
    errors = [float((_final("rk4", dt, kernel, dynamics) - ref).norm()) for dt in (0.2, 0.1)]
    ratio = errors[0] / errors[1]
    assert 12.0 < ratio < 22.0, (errors, ratio)


@pytest.mark.parametrize("kernel,dynamics", [("rope", "usa"), ("cosine_toeplitz", "sa")])
def test_euler_is_first_order(kernel, dynamics):
    ref = _final("rk4", 0.0125, kernel, dynamics)
    errors = [float((_final("euler", dt, kernel, dynamics) - ref).norm()) for dt in (0.02, 0.01)]
    ratio = errors[0] / errors[1]
    assert 1.8 < ratio < 2.2, (errors, ratio)


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
