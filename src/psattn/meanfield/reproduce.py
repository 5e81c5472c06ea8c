"""``reproduce(out_dir, quick)``: the whole mean-field set, written as report.md + PNG figures + JSON.

1. The paper experiment (``experiments.paper_configs``): n ∈ {64, 128, 256} (quick: 64), τ = 20, plain
   USA against RoPE, generalised RoPE, prefix tokens, distance bias and cosine Toeplitz;
   ``paper/summary.json``, final states on S² and diagnostics against time per n, and a GIF of the
   generalised-RoPE run (needs Pillow; skipped with a logged note otherwise).
2. The theorem checks (``theorems``), each saved to ``checks.json`` with its figure ``check_<kind>.png``.
   The cluster-count check needs scipy (the ``theory`` extra) and is skipped, not failed, without it.
3. ``report.md``: environment, a pass/fail table with the measured numbers, the constructions used,
   and links to every figure. Rerun over an earlier report, the earlier figures this one does not rewrite
   are removed (``REPORT_FIGURES``).

``quick=True`` keeps it to seconds on two cores (smaller sweeps, fewer β); the claims checked are the same.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import platform
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

import torch

from psattn.files import write_text
from psattn.meanfield import theorems
from psattn.meanfield.experiments import (
    ExperimentsFailed,
    ExperimentsInterrupted,
    paper_configs,
    run_experiments,
    save_states,
    torch_threads,
)
from psattn.meanfield.simulate import simulate
from psattn.meanfield.staging import STAGING_PREFIX
from psattn.meanfield.theorems import TheoremCheck
from psattn.processes import folder_made, new_staging, signals_unwind, tidy_staging
from psattn.progress import progress_bar
from psattn.provenance import git_revision
from psattn.version import __version__

logger = logging.getLogger(__name__)

ANIMATED_KERNEL = "generalised_rope"


def _check_plan(quick: bool) -> list[tuple[str, Callable[[], TheoremCheck]]]:
    """(label, thunk) for every theorem check; quick mode shrinks sizes, not the claims."""
    n = 64
    plan: list[tuple[str, Callable[[], TheoremCheck]]] = [
        (f"diracisation_{k}", partial(theorems.check_conditional_diracisation, k, n=n, batch=1 if quick else 2))
        for k in ("rope", "generalised_rope", "prefix")
    ]
    plan += [
        ("rope_orbit", lambda: theorems.check_rope_orbit_universality(n=n if quick else 256)),
        ("prefix_gauge", lambda: theorems.check_prefix_gauge_universality(n_prompts=32 if quick else 128)),
        ("dichotomy", lambda: theorems.check_spectral_dichotomy(n=n, batch=1 if quick else 2)),
        ("energy_ascent", lambda: theorems.check_energy_ascent()),
        ("integrator_order", lambda: theorems.check_integrator_order()),
        ("metastability", lambda: theorems.check_metastability()),
        ("metastability_rate", lambda: theorems.check_metastability_rate(
            betas=(2.0, 3.0, 4.0, 5.0, 6.0) if quick else (2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0))),
        ("cluster_count", lambda: theorems.check_cluster_count(
            betas=(9.0, 36.0) if quick else (4.0, 9.0, 16.0, 25.0, 36.0),
            n=128 if quick else 256, seeds=(0,) if quick else (0, 1, 2))),
    ]
    return plan


def _plots_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        logger.warning("matplotlib is not installed (extra 'plot'): no figures will be written")
        return False
    return True


def meanfield_report(
    out_dir: str | Path, quick: bool = True, progress: bool = False, threads: int | None = 1, *,
    moving: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> dict[str, Any]:
    """Run the mean-field set into out_dir; returns {"passed", "checks", "skipped", "files", "report"}.

    passed is False when any theorem check failed (skipped checks do not count). The files are written into a
    staging folder inside out_dir and moved into place once all are complete, inside ``moving()`` (the command
    line holds the stop signals there): a failure or a kill midway leaves an earlier report whole, not a mix of two.
    SIGTERM and SIGHUP (in the main thread, where their handlers are the default) stop it as Ctrl-C does: the staging
    folder is removed and the KeyboardInterrupt goes on, its ``signum`` naming the signal.

    Arguments of the wrong kind (an ``out_dir`` that is no path or is a file, a ``quick`` or ``progress`` that is not
    a bool, ``threads`` that is not a positive integer or None, a ``moving`` that is not a function) are refused in
    one line before any work; a failure leaves no ``out_dir`` that this call made.
    """
    out = _check_report_arguments(out_dir, quick, progress, threads, moving)
    earlier = (out / "report.md").is_file()  # the folder holds an earlier report, whose figures may not be rewritten
    with folder_made(out):
        tidy_staging(out, STAGING_PREFIX)
        # SIGTERM and SIGHUP, which ended the process on the spot, stop it as Ctrl-C; the staging folder is removed as
        # the block ends, a second stop meanwhile held until it is gone
        with signals_unwind(end=False), new_staging(out, f"{STAGING_PREFIX}{os.getpid()}-") as staging:
            result = _write_report(staging, quick, progress, threads)
            with moving():
                for path in sorted(p for p in staging.rglob("*") if p.is_file()):
                    target = out / path.relative_to(staging)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(path, target)
                if earlier:
                    remove_stale_figures(out, result["files"])
                shutil.rmtree(staging)  # its folders, emptied, before a stop held meanwhile ends the process
    return {**result, "report": str(out / "report.md")}


def _check_report_arguments(out_dir: Any, quick: Any, progress: Any, threads: Any, moving: Any) -> Path:
    """``out_dir`` as a Path, after ``meanfield_report``'s arguments are checked (TypeError or ValueError, one line)."""
    if not isinstance(out_dir, str | os.PathLike):
        raise TypeError(f"out_dir must be a folder's path, got {type(out_dir).__name__}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir {out} is a file; the report is a folder: name a new folder, or an earlier report's")
    for name, value in (("quick", quick), ("progress", progress)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)):
        raise TypeError(f"threads must be an integer ≥ 1 or None, got {threads!r}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be an integer ≥ 1 or None, got {threads!r}")
    if not callable(moving):
        raise TypeError(f"moving must be a function returning a context manager, got {type(moving).__name__}")
    return out


def _write_report(out: Path, quick: bool, progress: bool, threads: int | None) -> dict[str, Any]:
    """The mean-field set, written into the new folder ``out``; ``meanfield_report``'s result."""
    plots = _plots_available()
    summary, ns = _paper_experiment(out, quick, threads, progress)
    files = ["paper/summary.json"]
    notes: list[str] = []
    if plots:
        files += _paper_figures(out, summary, ns, quick, threads, notes)
    checks, skipped = _theorem_checks(summary, quick, threads, progress)
    records = [_check_record(out, check, plots) for check in checks]
    files += [r["figure"] for r in records if r["figure"] is not None]
    write_text(out / "checks.json", json.dumps(_json_safe(records), indent=1, allow_nan=False))
    files.append("checks.json")
    passed = all(c.passed for c in checks)
    report = _report(out, quick, summary, records, skipped, notes, files, passed)
    files.append(report.name)
    return {"passed": passed, "checks": records, "skipped": skipped, "files": files, "report": str(report)}


#: the figures a report writes (per n, per check, the animation): an earlier report's that this one did not rewrite
#: are removed, so that the folder's figures are the report's (a --quick rerun left a --full run's n = 128 and 256)
REPORT_FIGURES = ("final_states_n*.png", "diagnostics_n*.png", "animation_*.gif", "check_*.png")


def remove_stale_figures(out: Path, written: list[str]) -> None:
    """Remove the earlier report's figures in ``out`` (``REPORT_FIGURES``) that are not among ``written``."""
    stale = sorted({p.name for pattern in REPORT_FIGURES for p in out.glob(pattern)} - set(written))
    for name in stale:
        (out / name).unlink()
    if stale:
        logger.info("removed the earlier report's %s", ", ".join(stale))


def _paper_experiment(out: Path, quick: bool, threads: int | None, progress: bool) -> tuple[dict[str, Any], tuple]:
    """The paper's experiment (every kernel at each n), saved as paper/summary.json."""
    ns = (64,) if quick else (64, 128, 256)
    try:
        return run_experiments(paper_configs(ns=ns), out / "paper", threads=threads, progress=progress), ns
    except ExperimentsFailed as err:  # its summary.json is in the staging folder, removed with the report unwritten
        raise ExperimentsFailed(f"the paper experiment's {err.failure}", err.failed,
                                "no report written (an earlier one is left whole)") from err
    except ExperimentsInterrupted as err:  # the same: the report is written whole or not at all
        raise ExperimentsInterrupted(f"in the paper experiment, {err.where}", err.interrupted,
                                     "no report written (an earlier one is left whole)", err.signum) from None


def _paper_figures(out: Path, summary: dict[str, Any], ns: tuple, quick: bool, threads: int | None,
                   notes: list[str]) -> list[str]:
    """Final states and diagnostics per n, and the animation of one kernel; the files written."""
    from psattn.meanfield.plots import animate_states, plot_diagnostics, plot_final_states

    files = []
    for n in ns:
        plot_final_states(summary, out / f"final_states_n{n}.png", n=n)
        plot_diagnostics(summary, out / f"diagnostics_n{n}.png", n=n)
        files += [f"final_states_n{n}.png", f"diagnostics_n{n}.png"]
    animated = next(c for c in paper_configs(ns=ns) if c.kernel.name == ANIMATED_KERNEL)
    animated = dataclasses.replace(animated, keep_states=True, n_records=31 if quick else 81)
    with torch_threads(threads):
        states = save_states(simulate(animated), out / "animation_states.npz")
    gif = animate_states(states, out / f"animation_{ANIMATED_KERNEL}_n{animated.n}.gif")
    if gif is None:
        notes.append("The animation was skipped (Pillow is not importable).")
    else:
        files.append(gif.name)
    return files


def _theorem_checks(summary: dict[str, Any], quick: bool, threads: int | None,
                    progress: bool) -> tuple[list[TheoremCheck], list[str]]:
    """Every theorem check of the plan (the paper's claims first); checks whose optional extra is
    missing are skipped, with the reason."""
    checks: list[TheoremCheck] = [theorems.check_paper_claims(summary)]
    skipped: list[str] = []
    with torch_threads(threads):
        for label, thunk in progress_bar(_check_plan(quick), desc="theorem checks", unit="check", enabled=progress,
                                         leave=False):
            try:
                checks.append(thunk())
            except ImportError as err:  # optional extras (scipy) missing
                logger.warning("skipping %s: %s", label, err)
                skipped.append(f"{label}: {err}")
    return checks, skipped


def _check_record(out: Path, check: TheoremCheck, plots: bool) -> dict[str, Any]:
    """A check's saved record, with the file name of its figure (None without one)."""
    record = check.to_dict()
    record["figure"] = None
    if plots and check.kind:
        from psattn.meanfield.plots import plot_check

        name = f"check_{check.kind}" + (f"_{check.data['kernel']}" if check.kind == "diracisation" else "")
        path = plot_check(record, out / f"{name}.png")
        if path is not None:
            record["figure"] = path.name
    logger.info("%s: %s (%s)", "PASS" if check.passed else "FAIL", check.name, check.message)
    return record


def _json_safe(value: Any) -> Any:
    """Replace non-finite floats by None (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


CONSTRUCTIONS = """\
## Constructions

- **Conditional Dirac-isation.** For a gauge kernel A(ξ, ζ) = G(ξ)ᵀG(ζ) the co-moving coordinates
  y_i = G(ξ_i) x_i follow plain USA; the check asks that they collapse to one point y* (co-moving
  spread below 1e-6 and mean distance to the graph law x*(ξ) = G(ξ)ᵀy* below its square root, 1e-3, as
  the spread is half the mean squared distance) and the tokens sharing a label (a prompt) coincide in
  content space (spread below 1e-6), while the content marginal stays spread.
- **Orbit-wise universality (RoPE, Theorem 2).** One frequency ω = 1 on the plane (0, 1) of S².
  Target: the von Mises mixture 0.65·vM(0, 5) + 0.35·vM(2.4, 1.5) of the angle θ along the orbit.
  Positions s_i = −θ_i/ω with θ_i = F⁻¹((i + ½)/n) the target's quantiles, i.e. the label law
  ρ = (θ ↦ −θ/ω)_#ν. The flow runs from i.i.d. uniform content states; the maximiser it reaches has
  x_i = exp(−s_iωE₀₁) y*, so the angles of x_i measured from y* (the kernel commutes with rotations of
  that plane, so y* is as good a base point as any on its orbit) are compared with the target by the
  exact Wasserstein-1 distance on the circle, with the prescribed n-point law (realisation error) and
  with the continuous target (realisation + n-point discretisation error; the uniform orbit law is the
  reference).
- **Gauge-level universality (prefix tokens, Theorem 4).** P prompts with 2 tokens each; target: a
  projected Gaussian mixture on S² (weight 0.6 at e₀ with scale 0.25, weight 0.4 at (−e₀ + 2e₁)/√5
  with scale 0.6). Prompt p gets a point t_p (the p-th i.i.d. draw: a measurable map T from prompts to
  the sphere) and the gauge G(p) = S_p R_p, R_p the rotation in the plane of (t_p, e₀) with R_p t_p = e₀
  and S_p a random orthogonal map fixing e₀, so that G(p)ᵀe₀ = t_p. The co-moving energy is invariant
  under rotations, so every δ_y is a maximiser; the flow reaches some δ_{y*}, which is mapped onto the
  theorem's maximiser δ_{e₀} by the co-moving alignment x̃_i = G(p_i)ᵀ Q G(p_i) x_i with Q y* = e₀.
  Distances: the mean geodesic distance between x̃_i and t_{p_i} (an upper bound on W1 between the
  realised and prescribed laws) and the chordal energy distance to a 2000-point target sample (the
  prescribed points, a uniform sample and the unaligned flow state are the references).
- **Spectral dichotomy.** Distance bias c = exp(−(2/n)|s − t|) ≥ 0 against cosine Toeplitz
  c = cos(2π(s − t)/n), n = 64 on S², USA, β = 1, τ = 20. The distance-bias marginal spread must fall below
  10⁻³; the cosine Toeplitz one must stay above 0.5, its energy within 10⁻³ (relative) of the uniform great
  circle's, (1/(2βn²)) Σ_ij c_ij e^{β c_ij}.
- **Energy ascent.** n = 32 on S², USA and SA, β = 1, τ = 5, every kernel of the paper experiment: E_h must
  never fall, and at t = 0 its rise dE_h/dt (a third-order difference of the recorded energies) must be the
  flow's own rate within 1%: n Σ_i ‖P_{x_i}∇_{x_i}E_h‖² under USA, n² Σ_i ‖P_{x_i}∇_{x_i}E_h‖² / Z_i under SA
  (∇ by autograd of the direct O(n²) energy).
- **Integrator order.** n = 8 on S², β = 1, τ = 2: generalised RoPE under USA and cosine Toeplitz under
  SA, each with fixed steps h = 0.1, 0.05, 0.025; the observed order log2(‖x(h) − x(h/2)‖ / ‖x(h/2) − x(h/4)‖)
  of the final states must be 4 ± 0.5 for RK4.
- **Metastable plateau.** n = 32 particles on S¹ from i.i.d. uniform angles, SA, β = 4, τ = 300, five starts:
  clusters (cosine > 0.999, single linkage) are counted every 0.5 time units; a run's multi-cluster phase lasts
  from its first count of 2 to 4 until its count is 1 (or to τ), and in the median run it must last at least 10
  times as long as the clusters took to form. The clusters may merge before τ, as the theory says they
  eventually do: two clusters about 2.3 apart merge near t = 170, when the reduced two-cluster ODE says.
- **Metastability.** n = 16 particles on S¹ as two jittered clusters (angle noise 0.05) at distance
  π/2, SA dynamics; the plateau lifetime is the first time E_h passes half-way from the two-cluster
  value to the one-cluster value. log(lifetime) is fitted linearly in β and compared with the same fit
  of the reduced two-cluster ODE dφ/dt = −2e^{β cos φ} sin φ / (e^β + e^{β cos φ}), whose large-β rate
  is 1 − cos φ₀ = 1 (the finite-β fits are lower by the prefactor's 1/β); each lifetime must also be
  within 15% of that ODE's (which treats the clusters as points).
- **Cluster count.** SA on S¹ from equally spaced angles + N(0, 10⁻⁶) noise; clusters are runs of
  points separated by gaps > 10·2π/n, counted every 0.5 time units; the count on the first plateau
  (the first count above 1 held for 3 time units, past the transients while the gaps open) is compared
  with argmax_k k² I_k(β), the fastest-growing Fourier mode of the linearised flow.
"""


def _report(
    out: Path,
    quick: bool,
    summary: dict[str, Any],
    records: list[dict[str, Any]],
    skipped: list[str],
    notes: list[str],
    files: list[str],
    passed: bool,
) -> Path:
    lines = [
        "# Mean-field attention with auxiliary variables: reproduction report",
        "",
        f"Ran {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.platform()}, psattn {__version__}, "
        f"torch {torch.__version__}, git revision {git_revision() or 'unknown'}; mode: {'quick' if quick else 'full'}"
        f" (`psattn meanfield reproduce{' --quick' if quick else ''}`).",
        "",
        f"**Overall: {'PASS' if passed else 'FAIL'}** ({sum(r['passed'] for r in records)}/{len(records)} checks "
        f"passed{f', {len(skipped)} skipped' if skipped else ''}).",
        "",
        "## Theorem checks",
        "",
        "| check | result | measured |",
        "|---|---|---|",
    ]
    for r in records:
        lines.append(f"| {r['name']} | {'PASS' if r['passed'] else 'FAIL'} | {r['message']} |")
    for s in skipped:
        lines.append(f"| {s.split(':')[0]} | skipped | {s.split(':', 1)[1].strip()} |")
    lines += ["", "## Paper experiment (τ = 20, USA, RK4, β = 1, d = 3, seed 0)", "",
              "| run | frame | steps | step size | marginal spread | co-moving spread | aligned pairs | "
              "clusters | energy |", "|---|---|---|---|---|---|---|---|---|"]
    for run in summary["runs"]:
        f = run["final"]
        lines.append(
            f"| {run['name']} | {run['frame']} | {run['steps']} | {run['step_size']:.3g} | "
            f"{f['marginal_spread'][0]:.3g} | {f['comoving_spread'][0]:.2g} | {f['fraction_aligned'][0]:.3f} | "
            f"{f['cluster_count'][0]:.0f} | {'monotone' if run['energy_monotone'] else run['energy_check']} |")
    lines += ["", CONSTRUCTIONS, "## Figures", ""]
    lines += [f"- [{name}]({name})" for name in files if name.endswith((".png", ".gif"))]
    lines += [f"- {note}" for note in notes]
    path = out / "report.md"
    write_text(path, "\n".join(lines) + "\n")
    return path
