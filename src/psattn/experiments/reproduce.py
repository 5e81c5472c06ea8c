"""``psattn reproduce``: run the declared induction experiments and write ``report.md`` with figures,
each of the paper's numbers beside ours."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from psattn.experiments.bode_model import bode_model
from psattn.experiments.induction_report import declared_experiments, induction_section
from psattn.experiments.markdown import table as _table
from psattn.experiments.studies import induction
from psattn.experiments.studies.text import text_experiment
from psattn.experiments.study import check_mode
from psattn.experiments.sweep import run_sweep, unique_configs
from psattn.experiments.text_report import text_section
from psattn.files import write_texts
from psattn.processes import new_staging, signals_unwind, tidy_staging
from psattn.provenance import git_revision, machine
from psattn.training.signals import TrainingDiverged, TrainingInterrupted, stop_signals_held
from psattn.version import __version__


def meanfield_section(out: Path, mode: str, progress: bool, files: Path | None = None) -> tuple[list[str], dict]:
    """The mean-field experiment and theorem checks (their own report lies in ``meanfield/``, written to ``files``:
    ``out/meanfield`` unless given)."""
    from psattn.meanfield.reproduce import meanfield_report

    result = meanfield_report(files or out / "meanfield", quick=mode == "quick", progress=progress)
    lines = ["## Mean-field dynamics with auxiliary variables", "",
             "Full report, figures and animation: [meanfield/report.md](meanfield/report.md).", ""]
    lines += _table(["check", "result", "details"],
                    [[c["name"], "PASS" if c["passed"] else "FAIL", c["message"]] for c in result["checks"]])
    lines += [f"- skipped: {s}" for s in result["skipped"]] + [""]
    return lines, {"passed": result["passed"], "checks": [
        {"name": c["name"], "passed": c["passed"], "message": c["message"]} for c in result["checks"]]}


def _run_revision(run_dir: Path) -> str:
    meta = run_dir / "meta.json"
    revision = json.loads(meta.read_text()).get("git_revision") if meta.exists() else None
    return (revision or "unknown")[:7]


def theory_section(out: Path, mode: str, critical_pairs: list | None,
                   files: Path | None = None) -> tuple[list[str], dict]:
    """Certificates, the reduced model against the closed-form law, spectra; the measured Bode plot
    reads the seed-0 symmetric model of the variant table when it has been trained. Its files go to ``files``
    (``out/theory``, where the Bode run is trained in any case); the figure paths it returns are under
    ``out/theory``."""
    from psattn.theory.report import theory_report

    symmetric = next(c for c in induction.variant_table(mode)
                     if (a := c.model.layer_attention_configs()[0]).variant == "symmetric" and a.placement == "post_rope")
    run_dir = out / "runs" / symmetric.name
    model, label = bode_model(out / "theory", mode == "quick", run_dir if (run_dir / "result.json").exists() else None)
    result = theory_report(files or out / "theory", model, label, quick=mode == "quick",
                              sweep_results=[(d_k, g) for d_k, g, _ in critical_pairs or [] if g is not None] or None,
                              link_prefix="theory/")
    result["figures"] = {k: str(out / "theory" / Path(path).name) for k, path in result["figures"].items()}
    return [result["markdown"], ""], {k: v for k, v in result.items() if k != "markdown"}


SECTIONS = ("induction", "text", "theory", "meanfield")
#: the hidden folder inside ``--out`` that the sections write their figures (figures/) and the theory files
#: (theory/) into (then a process id)
FIGURES_STAGING = ".reproduce-figures-"


class ReproductionInterrupted(KeyboardInterrupt):
    """A stop signal (``signum``: Ctrl-C's SIGINT, SIGTERM or SIGHUP) outside the training runs, which checkpoint on
    their own (``TrainingInterrupted``); the message says when it came and what was kept, and begins with the
    signal's name unless it is Ctrl-C's. It pickles with these."""

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = signum

    def __reduce__(self):
        return type(self), (str(self), self.signum)


def _stopped(stop: KeyboardInterrupt, out: Path, placed: bool) -> ReproductionInterrupted:
    """What a stop that came outside the training runs left: the report in place (``placed``), or the runs and an
    earlier report."""
    signum = getattr(stop, "signum", signal.SIGINT)
    name = "" if signum == signal.SIGINT else f"{signal.Signals(signum).name} "
    if placed:  # held while the report moved in: it is whole
        return ReproductionInterrupted(f"{name}as the report was moved in: {out / 'report.md'} is written, whole", signum)
    return ReproductionInterrupted(
        f"{name}before the report was written: the finished runs under {out / 'runs'} are kept, and an earlier report "
        "is left whole; run the same command again: it skips the finished runs", signum)


def reproduce(
    out_dir: str | Path,
    mode: str = "quick",
    *,
    workers: int | None = None,
    progress: bool = True,
    sections: tuple[str, ...] = SECTIONS,
    executorch: bool = False,
) -> Path:
    """Run everything ``mode`` declares into ``out_dir``; returns the path of ``report.md``.
    ``executorch``: the real-text device table also has ExecuTorch rows (needs the executorch extra).
    A stop signal while a run trains checkpoints it (``TrainingInterrupted``); elsewhere Ctrl-C, and SIGTERM and
    SIGHUP (in the main thread, where their handlers are the default, which would end the process on the spot), stop
    it at once, the staging folder removed and the part beside stopped, and ``ReproductionInterrupted`` says what was
    kept."""
    check_mode(mode)
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown report sections {sorted(unknown)}; expected some of {SECTIONS}")
    if executorch:
        try:
            import executorch as _  # noqa: F401
        except ImportError:
            raise ImportError("the ExecuTorch rows need the executorch extra: "
                              "pip install 'phase-space-attention[executorch]'") from None
    out = Path(out_dir)  # made once the request is known to be runnable: a refused run leaves no folder
    out.mkdir(parents=True, exist_ok=True)
    tidy_staging(out, FIGURES_STAGING)
    # the sections write their figures, theory and mean-field files here; they move into figures/, theory/ and
    # meanfield/ with the report pair (docs/faults.md), so that a stop or a failure midway leaves the earlier report
    # with its own figures, theory and mean-field files (the runs under runs/ and theory/bode_run are kept)
    placed: list[bool] = []  # the report moved in
    # SIGTERM and SIGHUP, which ended the process on the spot, stop it as Ctrl-C; a second stop while the staging
    # folder is removed (a scheduler's own deadline) waits until it is gone, and then ends the process
    with signals_unwind(end=False), new_staging(out, f"{FIGURES_STAGING}{os.getpid()}-") as staged:
        try:
            _write_report(out, mode, sections, workers, progress, executorch, staged, placed)
        except TrainingInterrupted:  # a run checkpointed: its message says so
            raise
        except KeyboardInterrupt as stop:
            raise _stopped(stop, out, bool(placed)) from None
    return out / "report.md"


def _write_report(out: Path, mode: str, sections: tuple[str, ...], workers: int | None, progress: bool,
                  executorch: bool, staged: Path, placed: list[bool]) -> None:
    """``reproduce``'s work: train, run the sections (their files written into ``staged``), and write the report
    pair, moved in with them (``_staged_moved_in``, which appends True to ``placed`` once all are in place)."""
    started, revision = datetime.now(timezone.utc), git_revision()  # the code that runs: read before it does
    lines: list[str] = []
    data: dict[str, Any] = {}
    timings: dict[str, float] = {}
    with _timed(timings, "training"):
        runs = train_all(out, mode, sections, workers, progress)
    if "induction" in sections:
        with _timed(timings, "induction tables, heads and figures"):
            part, data["induction"] = induction_section(out, mode, workers, progress, staged / "figures")
        lines += part
    if "text" in sections:
        with _timed(timings, "real text: metrics, samples, edge export"):
            part, data["text"] = text_section(out, mode, workers, progress, executorch, staged / "figures")
        lines += part
    with _beside("meanfield" in sections and "theory" in sections) as pool:  # two single-threaded parts, two cores
        beside = None if pool is None else pool.submit(_timed_call, meanfield_section, out, mode, progress,
                                                       staged / "meanfield")
        if "theory" in sections:
            with _timed(timings, "theory and certificates"):
                part, data["theory"] = theory_section(out, mode, data.get("induction", {}).get("critical_pairs"),
                                                      staged / "theory")
            lines += part
        if "meanfield" in sections:
            if beside is not None:
                (part, data["meanfield"]), timings["mean field (beside the theory)"] = beside.result()
            else:
                with _timed(timings, "mean field"):
                    part, data["meanfield"] = meanfield_section(out, mode, progress, staged / "meanfield")
            lines += part
    data["timings"] = {"seconds": timings, "runs": runs}
    header = [
        f"# psattn reproduction ({mode})",
        "",
        f"Ran {started:%Y-%m-%d %H:%M} UTC on {machine()}, psattn {__version__}, "
        f"git {revision or 'unknown'}, one torch thread per training process. "
        f"Command: `psattn reproduce --{mode} --out {out}`. Every number below "
        "comes from the runs saved under `runs/` (configs, metrics and checkpoints); rerunning the command skips "
        f"finished runs. Wall time: {(datetime.now(timezone.utc) - started).total_seconds() / 60:.1f} minutes.",
        "",
    ]
    if runs["seconds"]:
        header[-2] += (f" This invocation trained {runs['trained_now']} runs and reused {runs['reused']} "
                       "finished ones" + (f" (trained at git {', '.join(runs['reused_git_revisions'])})."
                                          if runs["reused"] else "."))
    header += timing_lines(timings, runs["seconds"])
    # written whole and as a pair (docs/faults.md): a write cut short (a full disk) keeps both earlier files, and
    # a stop signal waits until both are in place, with the figures, theory and mean-field files, so all are of
    # one run
    write_texts({out / "results.json": json.dumps(data, indent=2, default=_json_default),
                 out / "report.md": "\n".join(header + lines) + "\n"},
                replacing=lambda: _staged_moved_in(staged, out, placed))


@contextmanager
def _staged_moved_in(staged: Path, out: Path, placed: list[bool]) -> Iterator[None]:
    """Hold the stop signals while the report pair is renamed into place, the files written into ``staged``'s
    folders (figures/, theory/, meanfield/ and its paper/) moved into those of ``out`` first; an earlier mean-field
    report's figures that this one did not write are removed (``remove_stale_figures``). ``placed`` gets True once
    all are in place, before a stop held meanwhile is handled."""
    with stop_signals_held():
        earlier = (staged / "meanfield").is_dir() and (out / "meanfield" / "report.md").is_file()
        written = [p.name for p in (staged / "meanfield").iterdir()] if earlier else []
        for path in sorted(p for p in staged.rglob("*") if p.is_file()):
            target = out / path.relative_to(staged)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
        if earlier:
            from psattn.meanfield.reproduce import remove_stale_figures

            remove_stale_figures(out / "meanfield", written)
        shutil.rmtree(staged)  # its folders, emptied, before a stop held meanwhile is handled
        yield
        placed.append(True)


@contextmanager
def _timed(timings: dict[str, float], name: str):
    start = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - start, 1)


def _timed_call(fn, *args):
    """(fn(*args), seconds it took), for a part run in another process."""
    start = time.perf_counter()
    result = fn(*args)
    return result, round(time.perf_counter() - start, 1)


@contextmanager
def _beside(wanted: bool):
    """One spawned worker process for a part that runs beside this process's (None when not ``wanted`` or
    on one core); killed when the block raises."""
    if not wanted or (os.cpu_count() or 1) < 2:
        yield None
        return
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            yield pool
        except BaseException:  # a stop or a failure here: the part beside is not waited for (minutes)
            for process in list((pool._processes or {}).values()):
                process.kill()
            raise


def train_all(out: Path, mode: str, sections, workers: int | None, progress: bool) -> dict[str, Any]:
    """Train every run the sections declare in one sweep, the longest first, so that the workers stay
    busy across experiments; the sections then read the finished runs. Returns how many runs were
    trained now and reused, and the training seconds of every run (those trained earlier included)."""
    configs = []
    if "induction" in sections:
        configs += [c for declared in declared_experiments(mode).values() for c in declared]
    if "text" in sections:
        configs += text_experiment(mode)
    unique = unique_configs(configs)
    for task in {c.task for c in unique if hasattr(c.task, "tokens")}:
        task.tokens()  # tokenize each corpus once, here: no worker races to build it, a missing extra fails now
    reused = [c.name for c in unique if (out / "runs" / c.name / "result.json").exists()]
    results = run_sweep(unique, out / "runs", workers=workers, progress=progress)
    diverged = [f"{name} (at step {r['diverged_at']})" for name, r in results.items() if r.get("diverged_at") is not None]
    if diverged:  # the report's tables have no place for them: say so instead of counting them as not emerged
        raise TrainingDiverged(f"{len(diverged)} run{'s' * (len(diverged) > 1)} diverged ({', '.join(diverged)}), as "
                               f"their result.json records; delete their folders under {out / 'runs'} to train them again")
    return {"trained_now": len(unique) - len(reused), "reused": len(reused),
            "reused_git_revisions": sorted({_run_revision(out / "runs" / name) for name in reused}),
            "seconds": {name: round(r["seconds"], 1) for name, r in results.items()}}


def timing_lines(timings: dict[str, float], runs: dict[str, float]) -> list[str]:
    """Where the wall time went, and the longest runs."""
    if not timings:
        return []
    longest = sorted(runs.items(), key=lambda kv: -kv[1])[:3]
    lines = ["| part | wall minutes |", "|---|---|"]
    lines += [f"| {name} | {seconds / 60:.1f} |" for name, seconds in timings.items()]
    if not runs:
        return lines + [""]
    lines += ["", f"Training: {len(runs)} runs, {sum(runs.values()) / 60:.1f} minutes of training in all (per "
                  "process, summed over the parallel workers); longest: "
              + ", ".join(f"{name} ({seconds:.0f} s)" for name, seconds in longest) + ".", ""]
    return lines


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"cannot serialise {type(x).__name__}")
