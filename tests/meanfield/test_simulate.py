"""simulate(): frozen labels, energy monotone, special cases, co-moving = direct, collapse vs not."""

import importlib
import os
from pathlib import Path

import pytest
import torch

from psattn.meanfield.config import KernelConfig, SimulationConfig
from psattn.meanfield.dynamics import normalise
from psattn.meanfield.gauges import rope_relative_rotation
from psattn.meanfield.integrators import get_stepper
from psattn.meanfield.simulate import initial_state, simulate


def _cfg(kernel="usa", **kw):
    base = dict(n=12, d=3, beta=1.0, tau=3.0, batch=2, n_records=5)
    base.update(kw)
    return SimulationConfig(kernel=kernel if isinstance(kernel, KernelConfig) else KernelConfig(kernel), **base)


def test_labels_are_frozen():
    labels = tuple(float(i) * 0.5 for i in range(12))
    cfg = _cfg("rope", labels=labels)
    traj = simulate(cfg)
    assert traj.labels.tolist() == list(labels)
    assert traj.kernel.labels.tolist() == list(labels)
    assert cfg.labels == labels


@pytest.mark.parametrize("kernel", ["usa", "rope", "generalised_rope", "prefix", "distance_bias", "cosine_toeplitz"])
@pytest.mark.parametrize("dynamics", ["usa", "sa"])
@pytest.mark.parametrize("integrator", ["euler", "rk4"])
def test_energy_non_decreasing_for_small_step(kernel, dynamics, integrator):
    traj = simulate(_cfg(kernel, dynamics=dynamics, integrator=integrator, beta=2.0, dt=0.05))
    assert traj.energy_check.monotone, traj.energy_check.summary()
    assert traj.energy.shape == (traj.times.shape[0], 2)


def test_large_step_violation_is_reported_with_its_step_size():
    cfg = _cfg("usa", n=16, beta=3.0, integrator="euler", dt=1.0, beta_aware_step=False, tau=40.0)
    check = simulate(cfg).energy_check
    assert not check.monotone and check.n_violations > 0
    assert check.step_size == 1.0 and all(v.step_size == 1.0 for v in check.violations)
    assert check.first_violation_time is not None


@pytest.mark.parametrize(("dtype", "beta"), [("float32", 70.0), ("float64", 600.0)])
def test_a_step_whose_squared_norm_overflows_stays_on_the_sphere(dtype, beta):
    # a fixed step h·v ~ e^β: ‖x + h·v‖² overflowed, x / inf was 0 and the run died in its diagnostics
    traj = simulate(_cfg("usa", n=16, beta=beta, beta_aware_step=False, tau=1.0, dtype=dtype))
    assert float((traj.x.norm(dim=-1) - 1).abs().max()) < 1e-6
    assert not traj.energy_check.monotone  # the step is reported as too large instead


@pytest.mark.parametrize(("config", "advice"), [
    (dict(dtype="float32", beta=60.0, beta_aware_step=False, dt=1e20, tau=1e20),  # h·v ~ 1e20 · e^60
     "dt = 1e+20, beta = 60) is too large; lower dt, lower beta, turn beta_aware_step on (it shrinks the step as e^β "
     "grows) or use dtype float64"),
    (dict(beta=30.0, beta_aware_step=False, dt=1e300, tau=1e300),  # h·v ~ 1e300 · e^30
     "dt = 1e+300, beta = 30) is too large; lower dt, lower beta or turn beta_aware_step on"),
], ids=["float32", "fixed_step"])
def test_a_step_that_overflows_the_dtype_is_one_line_naming_dt_and_beta(config, advice):
    """A step h·v beyond the dtype's range made the state NaN, and the run died in its diagnostics with 'states must
    be finite, got NaN or infinite entries', naming neither the step nor what to change."""
    with pytest.raises(ValueError, match=r"^the simulation overflowed float\d\d .* at step 1 of \d") as error:
        simulate(SimulationConfig(n=8, n_records=2, **config))
    assert advice in str(error.value) and "\n" not in str(error.value)


def test_an_overflow_between_records_ends_the_run_within_a_few_steps(monkeypatch):
    """A state that became NaN was found only at the next record: with 2 records the run went on to its last step
    (a billion, say) on NaN."""
    module = importlib.import_module("psattn.meanfield.simulate")  # the package's ``simulate`` is the function
    steps_taken = []

    def counting(name):
        stepper = get_stepper(name)
        return lambda field, x, h: (steps_taken.append(1), stepper(field, x, h))[1]

    monkeypatch.setattr(module, "get_stepper", counting)
    with pytest.raises(ValueError, match=r"^the simulation overflowed float64 .* at step 1 of 1,000, t = 1e\+300"):
        simulate(SimulationConfig(n=8, n_records=2, beta=30.0, beta_aware_step=False, dt=1e300, tau=1e303))
    assert len(steps_taken) <= 8  # FINITE_CHECK_STEPS, not the 1,000 to the last record


def _huge_label_factor(c, dt: float, steps: int) -> SimulationConfig:
    """8 particles on S² under a label factor c (8, 8) so large that the energy's sum overflows, a fixed step dt."""
    kernel = KernelConfig("gauge", gauges=[torch.eye(3).tolist()], label_factor=c)
    return SimulationConfig(n=8, d=3, kernel=kernel, dt=dt, tau=steps * dt, beta_aware_step=False, n_records=2)


def test_an_overflow_names_the_step_the_state_went_bad_not_the_one_its_energy_overflowed():
    """c_ij = 1e307: E_h = e^β Σ W / (2βn²) is inf from step 0 (the sum of 64 terms overflows) while the state and its
    velocity stay finite, until a step h·v overflows many steps later; the message named step 0, where the state
    was the finite starting one."""
    import re

    config = _huge_label_factor([[1e307] * 8] * 8, dt=20.0, steps=1000)
    with pytest.raises(ValueError, match=r"^the simulation overflowed float64 \(its state became NaN or infinite\) at "
                                         r"step [\d,]+ of 1,000") as error:
        simulate(config)
    step = int(re.search(r"at step ([\d,]+) of", str(error.value))[1].replace(",", ""))
    assert step > 1, str(error.value)
    before = simulate(_huge_label_factor(config.kernel.label_factor, dt=20.0, steps=step - 1))  # finite to step − 1
    assert bool(torch.isfinite(before.x).all()) and not bool(torch.isfinite(before.energy).any())
    with pytest.raises(ValueError, match=f" at step {step:,} of {step:,}, t = "):  # and not at step
        simulate(_huge_label_factor(config.kernel.label_factor, dt=20.0, steps=step))


def test_an_overflow_whose_energies_may_be_nan_while_the_state_is_finite_names_the_step_it_was_found():
    """c of both signs whose positive and negative parts each sum beyond float64: a finite state's energy can be
    inf − inf = NaN, so the step the state went bad is not known from its energies, and the message says by when."""
    signs = [[1e308 if (i + j) % 2 == 0 else -1e308 for j in range(8)] for i in range(8)]
    with pytest.raises(ValueError, match=r"\(its state became NaN or infinite\) by step (8|16|24|32|40) of 1,000, "):
        simulate(_huge_label_factor(signs, dt=1e300, steps=1000))


def test_the_overflow_step_is_the_first_after_a_batch_elements_last_energy_that_is_not_nan():
    """Per batch element, the state went bad after its last energy that is not NaN; an infinite energy (an overflowed
    sum) is a finite state's."""
    from psattn.meanfield.simulate import _overflow_step

    nan, inf = float("nan"), float("inf")
    energy = torch.tensor([[1.0, inf], [inf, inf], [inf, nan], [nan, nan], [nan, nan]])  # (S = 5, B = 2)
    assert _overflow_step(energy) == 2  # element 1 at step 2, element 0 at step 3
    assert _overflow_step(energy[:, :1]) == 3 and _overflow_step(energy[:2]) == 2  # no NaN: found at S
    assert _overflow_step(energy[:0]) == 0


def test_a_step_beyond_the_dtypes_range_is_refused_with_the_config_naming_dt():
    """dt = 1e39 in float32 (largest 3.4e38) made a step that was inf at its first use, found only at the first
    record, after the run was set up; the config now refuses it."""
    with pytest.raises(ValueError, match=r"^dt = 1e\+39 makes a step of 5e\+38, beyond the largest float32 \(3.4e\+38\); "
                                         r"lower dt or use dtype float64$"):
        SimulationConfig(n=8, n_records=2, dtype="float32", dt=1e39, tau=1e39)
    SimulationConfig(n=8, n_records=2, dtype="float32", dt=3e38, tau=3e38)  # a step of 1.5e38 fits


@pytest.mark.parametrize(
    "single_label",
    [
        KernelConfig("prefix", n_prompts=1, gauge_seed=3),
        KernelConfig("rope", frequencies=(1.3,)),  # every position equal: A = I
        KernelConfig("gauge", gauges=torch.linalg.qr(torch.randn(1, 3, 3, dtype=torch.float64))[0].tolist()),
    ],
    ids=["prefix", "rope", "gauge"],
)
def test_single_label_equals_plain_usa(single_label):
    labels = (0.0,) * 12 if single_label.name == "rope" else None
    plain = simulate(_cfg("usa"))
    labelled = simulate(_cfg(single_label, labels=labels))
    assert torch.allclose(labelled.x, plain.x, atol=1e-12)
    assert torch.allclose(labelled.energy, plain.energy, rtol=1e-12)


@pytest.mark.parametrize(
    "kernel",
    [KernelConfig("rope", frequencies=(0.7,)), KernelConfig("generalised_rope"), KernelConfig("prefix", n_prompts=3)],
    ids=lambda k: k.name,
)
@pytest.mark.parametrize("dynamics", ["usa", "sa"])
def test_direct_pairs_equal_comoving_integration(kernel, dynamics):
    direct = simulate(_cfg(kernel, dynamics=dynamics, frame="direct"))
    comoving = simulate(_cfg(kernel, dynamics=dynamics, frame="comoving"))
    assert direct.frame == "direct" and comoving.frame == "comoving"
    assert torch.allclose(direct.x, comoving.x, atol=1e-10)
    assert torch.allclose(direct.energy, comoving.energy, rtol=1e-10)


def test_rope_from_relative_rotations_equals_comoving_integration():
    # an independent direct path: A_ij = R(s_j − s_i) built from offsets only, run as an explicit table
    pos = torch.arange(12, dtype=torch.float64) * 0.9
    pairs = rope_relative_rotation(pos[None, :] - pos[:, None], 3, (1.0,))  # (n, n, d, d)
    table = simulate(_cfg(KernelConfig("pair", pair_matrices=pairs.tolist())))
    comoving = simulate(_cfg(KernelConfig("rope", frequencies=(1.0,)), labels=tuple(pos.tolist())))
    assert table.frame == "direct" and comoving.frame == "comoving"
    assert torch.allclose(table.x, comoving.x, atol=1e-10)


@pytest.mark.parametrize("kernel", ["usa", "prefix"])
def test_batch_element_0_does_not_depend_on_the_batch_size(kernel):
    """One (B, n, d) draw gave element 0, the one summarised, saved and animated, other starting points at another
    batch size when n·d was not a multiple of 16: the same seed with --batch 1 and --batch 4 ran other systems."""
    single = simulate(_cfg(kernel, n=10, batch=1, keep_states=True))  # n·d = 30
    batched = simulate(_cfg(kernel, n=10, batch=4, keep_states=True))
    assert torch.equal(batched.x0[0], single.x0[0])
    assert torch.allclose(batched.states[:, 0], single.states[:, 0], rtol=0, atol=1e-13)
    assert torch.allclose(batched.energy[:, 0], single.energy[:, 0], rtol=1e-13, atol=0)


def test_the_initial_state_draws_the_earlier_numbers_at_batch_1_and_whole_blocks():
    """Drawing element by element kept the numbers of one (B, n, d) draw at batch 1 and at n·d a multiple of 16 (the
    paper's n = 64, 128, 256 on S²)."""
    for n, batch in ((10, 1), (64, 3)):
        earlier = torch.randn(batch, n, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
        assert torch.equal(initial_state(_cfg(n=n, batch=batch, seed=5)), normalise(earlier))


def test_batch_elements_are_independent_runs():
    cfg = _cfg("rope", batch=3)
    batched = simulate(cfg)
    x0 = initial_state(cfg)[1:2]
    single = simulate(_cfg("rope", batch=1), x0=x0)
    assert torch.allclose(batched.x[1:2], single.x, atol=1e-13)


def test_baseline_usa_collapses():
    traj = simulate(SimulationConfig(n=64, d=3, beta=1.0, tau=20.0, batch=3, seed=0, n_records=5))
    assert torch.all(traj.final("fraction_aligned") == 1.0)
    assert torch.all(traj.final("cluster_count") == 1.0)
    assert torch.all(traj.final("marginal_spread") < 1e-8)


def test_rope_does_not_collapse_but_each_slice_does():
    cfg = SimulationConfig(n=64, d=3, beta=1.0, kernel=KernelConfig("rope"), tau=20.0, batch=3, seed=0, n_records=5)
    traj = simulate(cfg)
    assert torch.all(traj.final("fraction_aligned") < 0.2)
    assert torch.all(traj.final("marginal_spread") > 0.01)
    assert torch.all(traj.final("comoving_spread") < 1e-8)  # conditional Dirac-isation
    assert torch.all(traj.final("graph_law_distance") < 1e-4)


def test_diagnostic_series_shapes():
    traj = simulate(_cfg("prefix", n_records=7))
    assert traj.record_times.shape == (7,)
    for series in traj.diagnostics.values():
        assert series.shape == (7, 2)


def test_progress_callback_reaches_the_last_step():
    calls = []
    traj = simulate(_cfg("rope", n_records=4), progress=lambda done, total: calls.append((done, total)))
    steps = traj.times.shape[0] - 1
    assert calls[-1] == (steps, steps) and len(calls) == 4
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)


def test_records_beyond_the_steps_fall_on_every_step_at_once():
    """More records than steps: every step, without a loop over the records (10^11 of them hung)."""
    from psattn.meanfield.simulate import _record_steps

    assert _record_steps(300, 10**11) == list(range(301))
    for n_records in (2, 5, 300, 301, 302, 1000):
        spaced = sorted({round(k * 300 / (n_records - 1)) for k in range(n_records)})
        assert _record_steps(300, n_records) == spaced


def test_a_starting_state_that_cannot_be_put_on_the_sphere_is_refused():
    """A NaN entry or a particle at the origin (normalised: 0 / 0) ran, and every state and energy was NaN."""
    cfg = _cfg("usa", batch=1)
    for bad in (float("nan"), float("inf")):
        x0 = initial_state(cfg).clone()
        x0[0, 3, 1] = bad
        with pytest.raises(ValueError, match="x0 must be finite, with no particle at the origin"):
            simulate(cfg, x0=x0)
    x0 = initial_state(cfg).clone()
    x0[0, 5] = 0.0
    with pytest.raises(ValueError, match="no particle at the origin"):
        simulate(cfg, x0=x0)
    with pytest.raises(TypeError, match="x0 must be a torch.Tensor"):
        simulate(cfg, x0=x0.tolist())
    with pytest.raises(TypeError, match="simulate takes a SimulationConfig"):
        simulate({"n": 12})  # 'dict' object has no attribute 'torch_dtype'


@pytest.mark.parametrize("scale, dtype", [(1e-200, "float64"), (1e200, "float64"), (1e-50, "float32"), (1e300, "float32")])
def test_a_starting_state_of_any_finite_scale_is_put_on_the_sphere(scale, dtype):
    """Particles of tiny or huge norm (‖x_i‖² under- or overflows, or x_i does when cast to float32) gave an
    all-NaN run; each is put on the sphere by its norm, as x0 of ordinary size is."""
    cfg = _cfg("rope", batch=1, dtype=dtype)
    x0 = initial_state(_cfg("rope", batch=1))  # (1, n, d) float64 on the sphere
    traj = simulate(cfg, x0=scale * x0)
    assert torch.allclose(traj.x0.double(), x0, atol=1e-6)
    assert torch.allclose(traj.x, simulate(cfg, x0=x0).x)


def test_simulate_names_a_complex_start_a_bad_progress_and_an_unknown_diagnostic():
    cfg = _cfg("usa", batch=1)
    x0 = initial_state(cfg)
    with pytest.raises(TypeError, match="x0 must be a real tensor"):  # the imaginary part was dropped, with a warning
        simulate(cfg, x0=x0.to(torch.complex128))
    with pytest.raises(TypeError, match="progress must be a function"):  # 'int' object is not callable, at step 0
        simulate(cfg, progress=3)
    with pytest.raises(KeyError, match="recorded: mean_cosine"):  # KeyError: 'spread'
        simulate(cfg).final("spread")


def test_simulate_refuses_a_start_that_requires_grad():
    """Autograd recorded the whole run from such a start: memory grew with n²·steps (770 MiB more at n = 256, τ = 20),
    which the memory check does not count, and save_states then failed with numpy()'s traceback."""
    cfg = _cfg("rope", batch=1, tau=0.5)
    x0 = initial_state(cfg)
    with pytest.raises(TypeError, match="x0 must not require grad"):
        simulate(cfg, x0=x0.clone().requires_grad_())
    assert not simulate(cfg, x0=x0).x.requires_grad


def test_a_trajectory_keeps_the_config_it_ran_with():
    """A sweep that set cfg.beta and ran again left every Trajectory.config (and its summary) at the last beta."""
    cfg = _cfg("rope", batch=1, tau=0.5)
    runs = []
    for beta in (0.5, 2.0):
        cfg.beta = beta
        runs.append(simulate(cfg))
    assert [t.config.beta for t in runs] == [0.5, 2.0]
    cfg.kernel.frequencies = (0.25,)
    assert runs[1].config.kernel.frequencies is None


@pytest.mark.parametrize("field, value, match", [
    ("beta", float("nan"), "beta must be finite"),  # 'tau = 3 in steps of nan takes inf steps'
    ("n_records", 0, "n_records must be ≥ 2"),  # IndexError
    ("labels", (0.0, 1.0), "labels must have length n = 12"),  # einsum()
    ("dtype", "float16", "unknown dtype"),  # KeyError
    ("threshold", 2.0, r"threshold must lie in \(−1, 1\)"),  # ran, every pair "not aligned"
])
def test_a_field_set_after_construction_is_checked_when_the_run_starts(field, value, match):
    cfg = _cfg("rope", batch=1)
    setattr(cfg, field, value)
    with pytest.raises(ValueError, match=match):
        simulate(cfg)


@pytest.mark.parametrize("frame", ["comoving", "direct"])
def test_sa_with_a_token_that_interacts_with_none_is_refused_and_usa_runs(frame):
    """A zero row of the label factor makes SA's Z_i = 0: the state was 0/0 = NaN from the first step."""
    c = torch.ones(4, 4, dtype=torch.float64)
    c[1, :] = c[:, 1] = 0.0
    kernel = KernelConfig("gauge", gauges=[torch.eye(3).tolist()], label_factor=c.tolist())
    cfg = dict(n=4, d=3, tau=0.5, frame=frame, kernel=kernel)
    with pytest.raises(ValueError, match=r"Z_i .* is 0 for tokens \[1\]"):
        simulate(SimulationConfig(dynamics="sa", **cfg))
    traj = simulate(SimulationConfig(dynamics="usa", **cfg))  # token 1 stands still
    assert torch.equal(traj.x[:, 1], traj.x0[:, 1]) and bool(torch.isfinite(traj.x).all())


@pytest.mark.parametrize("frame", ["comoving", "direct"])
def test_the_float32_energy_of_a_cluster_at_large_beta_is_finite(frame):
    """E_h = e^β Σ W / (2βn²) fits in float32 for β ≤ 79, but e^β Σ W (formed first) overflowed once the
    particles clustered: the energy was inf at every step and the check read it as non-decreasing."""
    x0 = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64) + 1e-4 * torch.randn(1, 200, 3, dtype=torch.float64,
                                                                                 generator=torch.Generator().manual_seed(0))
    cfg = dict(n=200, d=3, beta=79.0, dynamics="sa", tau=0.2, frame=frame)
    f32, f64 = simulate(SimulationConfig(dtype="float32", **cfg), x0), simulate(SimulationConfig(**cfg), x0)
    assert bool(torch.isfinite(f32.energy).all()) and f32.energy_check.monotone
    assert torch.allclose(f32.energy.double(), f64.energy, rtol=1e-4)


def test_kept_states_are_held_once():
    """The recorded states were cloned into a list and stacked at the end: the run's peak held them twice (2.5 times
    their bytes, against the memory estimate's once, so a run it admitted at 60% of the free memory did not fit).
    Measured in a fresh process: its peak resident memory is one process-wide maximum."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import resource, torch
        from psattn.meanfield.config import SimulationConfig
        from psattn.meanfield.simulate import simulate
        torch.set_num_threads(1)
        simulate(SimulationConfig(n=8, d=4, tau=0.1, dynamics="sa", keep_states=True))  # the libraries loaded
        config = SimulationConfig(n=64, d=256, tau=2.0, dt=0.002, dynamics="sa", n_records=1001, keep_states=True)
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        states = simulate(config).states
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024 / (states.numel() * states.element_size()))
    """)
    grown = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert grown < 1.5


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads the process's resident memory from /proc")
def test_the_records_do_not_fragment_the_heap():
    """Each record's eight diagnostics were kept as (B,) tensors in lists, allocated among the record's (B, n, n)
    temporaries, which pinned the heap: the process grew by 0.3-0.9 MB a record at n = 200 (340-840 MB over 1001
    records; 13 GB over 15001 for a run estimated at 72 MB). Now they fill (R, B) tensors made before the steps."""
    page = os.sysconf("SC_PAGE_SIZE")
    resident = []

    def measured(done, total):
        resident.append(int(Path("/proc/self/statm").read_text().split()[1]) * page)

    cfg = SimulationConfig(n=200, tau=100.0, n_records=1001)
    traj = simulate(cfg, progress=measured)
    assert traj.diagnostics["mean_cosine"].shape == (1001, 1)
    grown = (resident[-1] - resident[len(resident) // 10]) / 2**20  # after the first records' warm-up
    assert grown < 40, f"the process grew by {grown:.0f} MiB over the records"
