"""``psattn meanfield run`` and ``psattn meanfield reproduce``: thin entry points over ``psattn.meanfield``.

Wire into a parser with ``register(subparsers)``; every subcommand sets ``func`` (args -> exit code).

    psattn meanfield run --kernel rope --n 64 --d 3 --beta 1 --tau 20 --out runs/rope
    psattn meanfield reproduce --out reports/meanfield --quick

``run`` resolves its configuration as defaults, then ``--config FILE`` (a JSON SimulationConfig, or the
config.json a previous run wrote), then
the flags given; a kernel named by ``--kernel`` starts from the paper experiment's parameters for that
n (e.g. RoPE with ω = 2π/n). Once the simulation has succeeded, it writes config.json (with version and
git revision), summary.json, final_state.png, diagnostics.png, states.npz and animation.gif (these two unless
``--no-animation`` or the config's ``keep_states`` is false) into ``--out``,
and removes those of an earlier run there that it does not write (moved in only once all are written, so an
interrupted run leaves the earlier one whole); a folder holding a training run is refused, and so, before
the simulation, is an ``--out`` that a file stands in.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psattn.arguments import add_command, add_late_choices, add_plan_size, seed_int
from psattn.jsonfile import read_json
from psattn.training.signals import stop_signals_held

if TYPE_CHECKING:
    from psattn.meanfield.config import SimulationConfig

__all__ = ["register", "resolve_run_config"]

logger = logging.getLogger(__name__)

# flag -> SimulationConfig field
_SIM_FLAGS = {"n": "n", "d": "d", "beta": "beta", "tau": "tau", "dt": "dt", "integrator": "integrator",
              "dynamics": "dynamics", "seed": "seed", "batch": "batch", "frame": "frame", "records": "n_records",
              "dtype": "dtype"}
# flag -> KernelConfig field
_KERNEL_FLAGS = {"frequencies": "frequencies", "omega": "omega", "decay": "decay", "n_prompts": "n_prompts",
                 "gauge_seed": "gauge_seed"}
# flag -> the kernels that read it (KernelConfig reads only the chosen kernel's fields)
_KERNEL_FLAG_USERS = {"frequencies": ("rope", "generalised_rope"), "omega": ("cosine_toeplitz",),
                      "decay": ("distance_bias",), "n_prompts": ("prefix",), "gauge_seed": ("prefix",)}


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``meanfield`` command group (``run``, ``reproduce``) to a subparsers object."""
    group = add_command(subparsers, "meanfield", "mean-field attention dynamics with auxiliary labels")
    sub = group.add_subparsers(dest="meanfield_command", required=True, metavar="COMMAND")

    run = add_command(sub, "run", "simulate one particle system; write figures and a JSON summary")
    run.add_argument("--config", metavar="FILE", help="JSON file with a SimulationConfig (flags below override it)")
    add_late_choices(run, "--kernel", names=_kernels, help="kernel, with the paper experiment's parameters")
    run.add_argument("--n", type=int, help="number of particles (default 64)")
    run.add_argument("--d", type=int, help="dimension: particles live on S^{d-1} (default 3)")
    run.add_argument("--beta", type=float, help="inverse temperature (default 1)")
    run.add_argument("--tau", type=float, help="time horizon (default 20)")
    run.add_argument("--dt", type=float, help="base step (default 0.1; USA shrinks it with beta)")
    add_late_choices(run, "--integrator", names=_integrators, help="time integrator (default rk4)")
    add_late_choices(run, "--dynamics", names=_dynamics, help="usa (unnormalised, default) or sa (normalised)")
    run.add_argument("--seed", type=seed_int, help="seed of the initial condition (default 0)")
    run.add_argument("--batch", type=int, help="independent initial conditions (default 1); element 0, the one "
                     "summarised and animated, starts the same at every batch size")
    run.add_argument("--frame", choices=("auto", "comoving", "direct"), help="implementation (default auto)")
    run.add_argument("--records", type=int, help="number of diagnostic records / animation frames (default 101; "
                     "the animation draws at most 200)")
    run.add_argument("--dtype", choices=("float64", "float32"), help="floating-point precision (default float64)")
    run.add_argument("--frequencies", type=float, nargs="+", help="RoPE / generalised RoPE frequencies")
    run.add_argument("--omega", type=float, help="cosine Toeplitz frequency")
    run.add_argument("--decay", type=float, help="distance-bias decay (non-negative)")
    run.add_argument("--n-prompts", type=int, help="prefix tokens: number of prompts")
    run.add_argument("--gauge-seed", type=seed_int, help="prefix tokens: seed of the random gauges")
    run.add_argument("--no-animation", action="store_true", help="skip states.npz and the GIF")
    run.add_argument("--out", default="reports/meanfield/run", metavar="DIR", help="output directory")
    run.set_defaults(func=cmd_run)

    rep = add_command(sub, "reproduce", "paper experiment + theorem checks + metastability; report.md")
    rep.add_argument("--out", default="reports/meanfield", metavar="DIR", help="output directory")
    add_plan_size(rep, quick="smaller sweeps (seconds)", full="the paper's sweeps (minutes)")
    rep.set_defaults(func=cmd_reproduce)
    return group


# the names ``run`` takes, read once it is used: the modules that define them import torch
def _kernels() -> tuple[str, ...]:
    from psattn.meanfield.experiments import PAPER_KERNELS

    return PAPER_KERNELS


def _integrators() -> tuple[str, ...]:
    from psattn.meanfield.integrators import STEPPERS

    return tuple(STEPPERS)


def _dynamics() -> tuple[str, ...]:
    from psattn.meanfield.dynamics import DYNAMICS

    return DYNAMICS


def resolve_run_config(args: argparse.Namespace) -> SimulationConfig:
    """Defaults, then --config, then the flags given (None means not given)."""
    import torch

    from psattn.meanfield.config import KernelConfig, SimulationConfig
    from psattn.meanfield.experiments import paper_kernel
    from psattn.training.memory import available_bytes

    base: dict[str, Any] = read_json(args.config, what="config file", object_only=True) if args.config else {}
    base = base.get("config", base)  # also accept a run directory's config.json
    if not isinstance(base, dict):
        raise ValueError(f"{args.config}: 'config' must be a JSON object, got {base!r}")
    known = {f.name for f in dataclasses.fields(SimulationConfig)}
    unknown = sorted(set(base) - known)
    if unknown:
        raise ValueError(f"{args.config}: unknown field{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))} of a mean-field config; known: {', '.join(sorted(known))}")
    if not isinstance(base.get("kernel") or {}, dict):
        raise ValueError(f"{args.config}: 'kernel' must be a JSON object (a name and its parameters), "
                         f"got {base['kernel']!r}")
    sim = {k: v for k, v in base.items() if k != "kernel"}
    for flag, key in _SIM_FLAGS.items():
        if getattr(args, flag, None) is not None:
            sim[key] = getattr(args, flag)
    n = sim.get("n", SimulationConfig.n)
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:  # the paper kernels' frequencies divide by n
        raise ValueError(f"n, the number of particles, must be an integer >= 2, got {n!r}")
    if args.kernel is not None:
        kernel = dataclasses.asdict(paper_kernel(args.kernel, n))
    else:
        kernel = dict(base.get("kernel") or dataclasses.asdict(paper_kernel("usa", n)))
    for flag, key in _KERNEL_FLAGS.items():
        if getattr(args, flag, None) is not None:
            users, name = _KERNEL_FLAG_USERS[flag], kernel.get("name", KernelConfig.name)
            if name not in users:  # it was recorded in config.json and never read
                raise ValueError(f"--{flag.replace('_', '-')} sets a parameter of the {' and '.join(users)} "
                                 f"kernel{'s' * (len(users) > 1)}, not of {name!r}")
            kernel[key] = getattr(args, flag)
    if getattr(args, "no_animation", False):
        sim["keep_states"] = False
    else:  # the states feed states.npz and the GIF; a config's keep_states (true or false) stands
        sim.setdefault("keep_states", True)
    free = available_bytes(torch.device("cpu"))  # the run is refused when it would not fit
    return SimulationConfig(kernel=kernel, **sim, available_memory=free)  # type: ignore[arg-type]  # a dict: checked there


#: the files ``run`` writes into ``--out``, each when its run has it (no animation under --no-animation, say)
RUN_FILES = ("config.json", "summary.json", "final_state.png", "diagnostics.png", "states.npz", "animation.gif")


def holds_a_meanfield_run(out: Path) -> bool:
    """Whether ``out`` holds an earlier ``meanfield run``'s files: a config.json with its ``config`` object."""
    try:
        held = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):  # missing, unreadable or not JSON
        return False
    return isinstance(held, dict) and isinstance(held.get("config"), dict)


def check_not_a_training_run(out: Path) -> None:
    """Refuse an output folder that holds a psattn training run (its checkpoint.pt, or a config.json with
    model, task or train sections): the run's config.json would be replaced."""
    config = out / "config.json"
    try:
        held = json.loads(config.read_text()) if config.is_file() else {}
    except (OSError, ValueError):  # unreadable or not JSON: not a training run's
        held = {}
    if (out / "checkpoint.pt").exists() or (isinstance(held, dict) and {"model", "task", "train"} & set(held)):
        raise ValueError(f"{out} holds a training run, whose config.json a mean-field run would replace: "
                         "name another --out folder")


def check_a_folder_can_be_made(out: Path) -> None:
    """Refuse an output folder that a file stands in, or above (its folder could not be made), before the run."""
    held = next((p for p in (out, *out.parents) if p.exists()), None)  # the folders missing are made
    if held is not None and not held.is_dir():
        raise ValueError(f"{held} is a file, where a folder is needed: name a folder for --out (or move the file away)")


def cmd_run(args: argparse.Namespace) -> int:
    """``psattn meanfield run``: simulate, write figures and summary.json; the exit code. Nothing is
    written before the simulation has succeeded, and the files are written into a staging folder inside
    ``--out`` and moved into place (with the earlier run's others removed) only once all are complete, with
    the stop signals held: Ctrl-C or a failure while writing leaves the earlier run, whole, not a mix of two.
    SIGTERM and SIGHUP stop it as Ctrl-C does (they ended the process on the spot), and ``ExperimentsInterrupted``
    says what the stop left, as a batch's does."""
    from psattn.meanfield.experiments import ExperimentsInterrupted, interrupted_run, run_name, torch_threads
    from psattn.meanfield.simulate import simulate, step_size
    from psattn.meanfield.staging import STAGING_PREFIX
    from psattn.processes import new_staging, signals_unwind, tidy_staging
    from psattn.progress import progress_bar

    config = resolve_run_config(args)
    out = Path(args.out)
    check_not_a_training_run(out)
    check_a_folder_can_be_made(out)  # a file in the way was found once the simulation had run, and it was lost
    if not config.keep_states and not args.no_animation:
        print(f"{args.config} sets keep_states false: no states.npz or animation (set it true for them)")
    _, steps = step_size(config)
    moved: list[bool] = []  # this run's files in place
    try:
        with signals_unwind(end=False):  # SIGTERM and SIGHUP, which ended the process on the spot, stop it as Ctrl-C
            with (progress_bar(total=steps, desc=f"{config.kernel.name} n={config.n}", unit="step") as bar,
                  torch_threads(1)):
                traj = simulate(config, progress=lambda done, total: bar.update(done - bar.n))
            earlier = holds_a_meanfield_run(out)
            out.mkdir(parents=True, exist_ok=True)
            tidy_staging(out, STAGING_PREFIX)
            with new_staging(out, f"{STAGING_PREFIX}{os.getpid()}-") as staging:  # removed as the block ends
                written = _write_run(staging, config, traj)
                with stop_signals_held():  # the moves are not cut halfway
                    for name in written:
                        os.replace(staging / name, out / name)
                    stale = [name for name in RUN_FILES if earlier and name not in written and (out / name).exists()]
                    for name in stale:  # the earlier run's, beside this one's config and summary: the folder is one run's
                        (out / name).unlink()
                    shutil.rmtree(staging)  # before a stop held meanwhile is handled
                    moved.append(True)
    except KeyboardInterrupt as stop:  # what the stop left, in the line the batch's stop gives
        signum = getattr(stop, "signum", signal.SIGINT)
        if moved:
            raise ExperimentsInterrupted("as its files were moved in", None, f"{out} holds this run's files, whole",
                                         signum) from None
        raise ExperimentsInterrupted(f"during the run ({run_name(config)})", interrupted_run(0, config),
                                     f"nothing written to {out} (an earlier run there is left whole)", signum) from None
    print(f"wrote {', '.join(written)} to {out}")
    if stale:
        print(f"removed the earlier run's {', '.join(stale)}")
    return 0


def _write_run(folder: Path, config: SimulationConfig, traj) -> list[str]:
    """Write a finished run's files into ``folder``, print its one-line result; the names written."""
    from psattn.meanfield.experiments import save_states, summarise, write_summary
    from psattn.provenance import provenance

    meta = {**provenance(config.seed), "config": config.to_dict()}
    (folder / "config.json").write_text(json.dumps(meta, indent=1))
    record = summarise(traj)
    summary = write_summary([record], folder)
    final = record["final"]
    first = f"batch element 0 of {config.batch}: " if config.batch > 1 else ""  # the numbers are its alone
    print(f"{record['name']}: {record['steps']} {config.integrator} steps of {traj.step_size:.3g} "
          f"({traj.frame} frame); {first}"
          f"marginal spread {final['marginal_spread'][0]:.3g}, co-moving spread {final['comoving_spread'][0]:.2g}, "
          f"aligned pairs {final['fraction_aligned'][0]:.3f}, clusters {final['cluster_count'][0]:.0f}; "
          f"{record['energy_check']}")
    written = ["config.json", "summary.json"]
    try:
        from psattn.meanfield.plots import animate_states, plot_diagnostics, plot_final_states
    except ImportError:
        print("matplotlib is not installed (extra 'plot'): no figures written")
        return written
    if config.d in (2, 3):
        plot_final_states(summary, folder / "final_state.png")
        written.append("final_state.png")
    else:
        print(f"d = {config.d}: no picture of the final state (drawn for d = 2 or 3 only)")
    plot_diagnostics(summary, folder / "diagnostics.png")
    written.append("diagnostics.png")
    if traj.states is not None:
        save_states(traj, folder / "states.npz")
        written.append("states.npz")
        if config.d in (2, 3):
            gif = animate_states(folder / "states.npz", folder / "animation.gif")
            if gif is None:
                print("animation skipped (Pillow is not importable)")
            else:
                written.append("animation.gif")
    return written


def cmd_reproduce(args: argparse.Namespace) -> int:
    """``psattn meanfield reproduce``: the paper's experiments and theorem checks; the exit code. Like ``run``,
    the report is written into a staging folder inside ``--out`` and moved into place once complete
    (``meanfield_report``), here with the stop signals held: a kill or a failure midway leaves the earlier
    report whole, not a mix of two."""
    from psattn.meanfield.reproduce import meanfield_report

    # the moves are not cut halfway
    result = meanfield_report(args.out, quick=args.mode == "quick", progress=True, moving=stop_signals_held)
    for check in result["checks"]:
        print(f"{'PASS' if check['passed'] else 'FAIL'}  {check['name']}: {check['message']}")
    for skipped in result["skipped"]:
        print(f"SKIP  {skipped}")
    print(f"report: {result['report']}")
    return 0 if result["passed"] else 1
