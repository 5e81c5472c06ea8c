"""Run one configured simulation: ``simulate(config) -> Trajectory``.

The state is integrated in the co-moving frame y_i = G(ξ_i) x_i whenever the kernel has gauge form
(``frame="auto"``), in the content frame with per-pair matrices otherwise (``frame="direct"``).
The energy is recorded at every step; diagnostics of the content state x at ``n_records`` evenly
spaced steps. The number of steps is ceil(tau / η) and the step is shrunk to tau / steps so the run
ends exactly at tau.

Runs are small dense tensor loops: on a shared CPU, ``torch.set_num_threads(1)`` is usually fastest
(``experiments.run_experiments`` does this for its runs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from psattn.meanfield.config import SimulationConfig, build_kernel
from psattn.meanfield.diagnostics import DIAGNOSTIC_NAMES, diagnose
from psattn.meanfield.dynamics import ComovingField, DirectField, VelocityField, normalise
from psattn.meanfield.energy_monitor import EnergyCheck, check_monotone
from psattn.meanfield.integrators import get_stepper
from psattn.meanfield.kernels import LabelledKernel

logger = logging.getLogger(__name__)

#: how often (in steps) the state is checked for NaN or infinite entries between records, on a CPU: a check takes
#: about 8 µs, 1.5-6% of a small system's step (140-550 µs), so a check every 8 steps costs under 1%
FINITE_CHECK_STEPS = 8


@dataclass
class Trajectory:
    """Everything a run produced. B = config.batch, S = steps, R = records."""

    config: SimulationConfig  # the run's own copy, validated
    kernel: LabelledKernel  # labels, label factor and gauges of the run
    x: Tensor  # (B, n, d) final content state
    x0: Tensor  # (B, n, d) initial content state
    labels: Tensor  # (n,) the frozen labels
    frame: str  # "comoving" or "direct": which implementation ran
    step_size: float  # η actually used
    times: Tensor  # (S+1,)
    energy: Tensor  # (S+1, B) E_h at every step
    record_times: Tensor  # (R,)
    diagnostics: dict[str, Tensor]  # name -> (R, B)
    states: Tensor | None  # (R, B, n, d) when config.keep_states
    energy_check: EnergyCheck

    def final(self, name: str) -> Tensor:
        """Final value of one diagnostic, (B,)."""
        if name not in self.diagnostics:
            raise KeyError(f"no diagnostic {name!r}; recorded: {', '.join(self.diagnostics)}")
        return self.diagnostics[name][-1]


def initial_state(config: SimulationConfig) -> Tensor:
    """i.i.d. uniform points on ``S^{d−1}`` from config.seed: (B, n, d).

    Batch element b is the (b+1)-th (n, d) normal draw of one generator seeded with config.seed, so it depends on
    (seed, b) alone and element 0 starts the same at every batch size: one (B, n, d) draw gave element 0 other numbers
    at another batch size when n·d was not a multiple of 16 (torch draws normals in blocks of 16). At batch 1, or with
    n·d a multiple of 16, the two draw the same numbers."""
    gen = torch.Generator().manual_seed(config.seed)
    draws = [torch.randn(config.n, config.d, generator=gen, dtype=torch.float64) for _ in range(config.batch)]
    x = torch.stack(draws)  # B × (n, d) -> (B, n, d)
    return normalise(x).to(config.torch_dtype)


def step_size(config: SimulationConfig) -> tuple[float, int]:
    """(η, number of steps): the β-aware USA step (if enabled), shrunk so steps·η = tau."""
    return config.step_size()


def _record_steps(steps: int, n_records: int) -> list[int]:
    """The distinct steps of n_records evenly spaced records; every step when they outnumber the steps."""
    if n_records > steps:  # spacing steps / (n_records − 1) ≤ 1: every step 0..steps is the nearest to one record
        return list(range(steps + 1))
    return sorted({round(k * steps / (n_records - 1)) for k in range(n_records)})


def simulate(
    config: SimulationConfig,
    x0: Tensor | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Trajectory:
    """Integrate the configured system from x0 (B, n, d) or from config.seed.

    progress, if given, is called as progress(steps done, total steps) at every record (for a bar). A state that
    becomes NaN or infinite (a step h·v beyond the dtype's range) raises a ValueError within ``FINITE_CHECK_STEPS``
    steps on a CPU (at the next record on a GPU), naming the step where it happened (the step it was found by, when
    the label factor's positive and negative parts both sum beyond the dtype's range), dt and beta and what to change.
    """
    if not isinstance(config, SimulationConfig):
        raise TypeError(f"simulate takes a SimulationConfig (SimulationConfig(**fields)), got {type(config).__name__}")
    # a validated copy: a field set after construction is checked, and changing it later (a sweep that sets
    # cfg.beta and runs again) leaves this run's Trajectory.config as it ran
    config = replace(config, kernel=replace(config.kernel))
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a function progress(done, total) or None, got {type(progress).__name__}")
    dtype = config.torch_dtype
    kernel = build_kernel(config).to(dtype)
    frame, field, to_frame, from_frame = _frame(config, kernel)
    stepper = get_stepper(config.integrator)
    x0 = _starting_state(config, x0)
    eta, steps = step_size(config)
    records = _record_steps(steps, config.n_records)
    logger.info("simulate %s/%s/%s: n=%d d=%d beta=%g eta=%.3g steps=%d frame=%s",
                config.kernel.name, config.dynamics, config.integrator, config.n, config.d, config.beta, eta, steps,
                frame)

    energy = torch.empty(steps + 1, config.batch, dtype=dtype)
    # each (R, B), filled record by record: lists of one (B,) tensor per record, kept among each record's (B, n, n)
    # temporaries, pinned the heap (0.3 MB a record at n = 200: 13 GB over 15001 records for a run estimated at 72 MB)
    series = {name: torch.empty(len(records), config.batch, dtype=dtype, device=x0.device) for name in DIAGNOSTIC_NAMES}
    # filled record by record: a list of them stacked at the end held every state twice (twice the memory estimate)
    states = torch.empty(len(records), config.batch, config.n, config.d, dtype=dtype) if config.keep_states else None

    def record(index: int, state: Tensor) -> None:
        x = from_frame(state)
        if not bool(torch.isfinite(x).all()):  # NaN stays NaN (each step normalises): caught at the next check
            raise ValueError(_overflow_message(config, kernel, eta, steps, energy[: records[index]], x, records[index]))
        for name, value in diagnose(x, kernel, config.threshold).items():
            series[name][index] = value  # (B,) into (R, B)
        if states is not None:
            states[index] = x  # (B, n, d) into (R, B, n, d)

    state = to_frame(x0)
    # between records, the state is checked every few steps on a CPU; on a GPU the check would wait for the step
    # to finish, so it is left to the records
    check_every = FINITE_CHECK_STEPS if state.device.type == "cpu" else steps + 1
    next_record = 0
    for k in range(steps):
        if k == records[next_record]:
            record(next_record, state)
            next_record += 1
            if progress is not None:
                progress(k, steps)
        elif k % check_every == 0 and not bool(torch.isfinite(state).all()):
            raise ValueError(_overflow_message(config, kernel, eta, steps, energy[:k], state, k))
        state, energy[k] = stepper(field, state, eta)
    energy[steps] = field(state)[1]
    record(next_record, state)  # the last record, at step ``steps``
    if progress is not None:
        progress(steps, steps)

    times = torch.arange(steps + 1, dtype=torch.float64) * eta
    check = check_monotone(times, energy, eta)
    if not check.monotone:
        logger.warning("%s: %s", config.kernel.name, check.summary())
    return Trajectory(
        config=config,
        kernel=kernel,
        x=from_frame(state),
        x0=x0,
        labels=kernel.labels,
        frame=frame,
        step_size=eta,
        times=times,
        energy=energy,
        record_times=times[records],
        diagnostics=series,  # each (R, B)
        states=states,  # (R, B, n, d)
        energy_check=check,
    )


def _overflow_message(config: SimulationConfig, kernel: LabelledKernel, eta: float, steps: int, energy: Tensor,
                      state: Tensor, step: int) -> str:
    """One line for a run whose state (B, n, d) is NaN or infinite at ``step`` (a step h·v beyond the dtype's range),
    with the energies (step, B) before it: the step at which it became so (``_overflow_step``), and what to change."""
    bad = ~torch.isfinite(state).flatten(1).all(-1)  # (B,) the batch elements gone NaN or infinite
    # a finite state's energy is NaN only where its sum Σ_ij c_ij e^{β(⟨·,·⟩−1)} met both +inf and −inf, which needs
    # its positive and its negative terms (each at most |c_ij|) both to add up beyond the dtype's range
    c = kernel.label_factor.double()
    exact = min(float(c.clamp(min=0).sum()), float(c.clamp(max=0).abs().sum())) < torch.finfo(energy.dtype).max / 2
    first = _overflow_step(energy[:, bad]) if exact else step
    fixes = ["lower dt"]
    if config.dynamics == "usa" and not config.beta_aware_step:  # a fixed step against a velocity growing like e^β
        fixes += ["lower beta", "turn beta_aware_step on (it shrinks the step as e^β grows)"]
    if config.dtype == "float32":
        fixes.append("use dtype float64")
    advice = fixes[0] if len(fixes) == 1 else f"{', '.join(fixes[:-1])} or {fixes[-1]}"
    when = "at" if exact else "by"  # by: found at that step, the one it happened at not known
    return (f"the simulation overflowed {config.dtype} (its state became NaN or infinite) {when} step {first:,} of "
            f"{steps:,}, t = {first * eta:.4g}: the step {eta:.3g} (dt = {config.dt:g}, beta = {config.beta:g}) is "
            f"too large; {advice}")


def _overflow_step(energy: Tensor) -> int:
    """The step at which the batch elements whose energies (S, B) these are, found NaN or infinite at step S, became
    so: a state that is not finite has a NaN energy (normalised, inf / inf is NaN) and stays so, so each element's
    went bad just after its last energy that is not NaN; the earliest of these. Exact where a finite state's energy
    is never NaN (an infinite energy, whose sum overflowed, is no sign of a bad state).
    """
    if energy.shape[0] == 0:
        return 0
    after = torch.arange(1, energy.shape[0] + 1, device=energy.device)[:, None]  # (S, 1): the step after each energy's
    return int(torch.where(torch.isnan(energy), 0, after).amax(0).min())  # after each column's last non-NaN energy


def _frame(config: SimulationConfig, kernel) -> tuple[str, VelocityField, Callable, Callable]:
    """Where to integrate: co-moving coordinates y_i = G(ξ_i) x_i when the kernel has the gauge form
    (one n×n product per step), else the direct field; with the maps into and out of that frame."""
    frame = config.frame if config.frame != "auto" else ("comoving" if kernel.has_gauge_form else "direct")
    if frame == "comoving":
        return frame, ComovingField(kernel.label_factor, config.beta, config.dynamics), kernel.to_comoving, kernel.from_comoving
    field = DirectField(kernel.label_factor, kernel.pair_matrices(), config.beta, config.dynamics)
    return frame, field, _identity, _identity


def _starting_state(config: SimulationConfig, x0: Tensor | None) -> Tensor:
    """x0 (B, n, d) on the sphere: the given one (shape checked) or the seeded default."""
    if x0 is None:
        x0 = initial_state(config)
    elif not isinstance(x0, Tensor):
        raise TypeError(f"x0 must be a torch.Tensor (batch, n, d) or None, got {type(x0).__name__}")
    elif x0.shape != (config.batch, config.n, config.d):
        raise ValueError(f"x0 must have shape {(config.batch, config.n, config.d)}, got {tuple(x0.shape)}")
    elif x0.is_complex():  # cast to a real dtype, the imaginary part was dropped with only a warning
        raise TypeError(f"x0 must be a real tensor, got {x0.dtype}")
    elif x0.requires_grad:  # autograd recorded every step: memory grew with n²·steps past the memory check
        raise TypeError("x0 must not require grad: simulate does not differentiate through a run (autograd would keep "
                        "every step's (n, n) weights); pass x0.detach()")
    elif not bool(torch.isfinite(x0).all()) or bool((x0 == 0).all(dim=-1).any()):  # normalised, either is NaN
        raise ValueError("x0 must be finite, with no particle at the origin (each is put on the sphere by its norm)")
    x = x0.to(config.torch_dtype)
    norm = x.norm(dim=-1)  # (B, n)
    if not bool(((norm > 0) & torch.isfinite(norm)).all()):  # ‖x_i‖² under- or overflowed (or x_i did, cast)
        x = x0.double() / x0.double().abs().amax(dim=-1, keepdim=True)  # largest entry ±1 in every particle
        return normalise(x).to(config.torch_dtype)
    return normalise(x)


def _identity(x: Tensor) -> Tensor:
    return x
