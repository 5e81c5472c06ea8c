"""A declared GPU sweep in pieces: one piece per command on a GPU machine, its results back as one archive.

``run EXPERIMENT`` (on the GPU machine, from a plain checkout with ``PYTHONPATH=src``):

1. every run already saved under ``--results`` (default ``docs/results/gpu/EXPERIMENT``, committed) is
   written back as a finished run directory under ``--runs``, so the sweep skips it on a fresh machine;
2. ``psattn sweep EXPERIMENT --full --time-limit`` trains what is left, one run after another (``--workers
   N``: N at a time, each in its own process, sharing the GPU), until the time limit (counted from the
   script's start): the runs in progress checkpoint, and the next piece resumes them;
3. every run finished but not yet saved is summarised (``psattn.experiments.saved_runs``) into one
   archive, ``--out/EXPERIMENT.tar.gz``, and its checkpoint deleted (a psa-92m one is about 1 GB), also
   when the sweep ended with an error;
4. the run left in progress, if its directory fits in three parts of 15 MiB (a text_scale model's
   does; a psa-92m one does not), comes back as ``--out/EXPERIMENT-in-progress.tar.NN-of-MM``
   (``psattn.experiments.run_parts``): unpacked here into ``gpu_runs/`` and carried to the next piece
   (the device tool's ``carry``), it resumes where it stopped on a fresh machine, which otherwise starts
   it again.

``unpack FILE...`` (here, after the piece came back): the archive's summaries into ``docs/results/gpu``, the BPE
tokenizer a text sweep's first piece trained (``tokenizer-<entry>.json``) into ``docs/results/gpu/tokenizers``, where
the next pieces load it from instead of training it again on their fresh machine,
and the parts of a run in progress joined into ``gpu_runs/<experiment>/<run>`` (not over a later step of it,
nor once it is finished: an older piece unpacked late changes nothing; several pieces' files may be given at
once, each piece's in its own folder).
``page``: docs/at_scale.md's tables, verdicts and status rewritten from ``docs/results/gpu``, and its
figures drawn into docs/figures (needs matplotlib). ``status EXPERIMENT``: how many of its declared
runs are saved.

``--smoke`` runs the quick plan (tiny models on the CPU) and keeps everything under ``--out``: the
script's own check, end to end (run, pack, unpack, the table rebuilt from the unpacked summaries).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU_SWEEPS = ("paper_scale", "text_scale", "text_scale_pilot")
#: where a GPU sweep's summaries are committed
RESULTS = ROOT / "docs" / "results" / "gpu"
#: the folder of RESULTS that keeps the BPE tokenizers the text sweeps' first pieces trained, one per corpus
TOKENIZERS = "tokenizers"


def _experiment(name: str):
    from psattn.experiments.declared import STUDIES

    return STUDIES[name].plan


def results_folder(experiment: str) -> str:
    """The folder of ``docs/results/gpu`` that keeps ``experiment``'s runs (the pilot's are text_scale's)."""
    return "text_scale" if experiment == "text_scale_pilot" else experiment


def restore_saved(results: Path, runs: Path) -> int:
    from psattn.experiments.saved_runs import restore

    return sum(restore(path, runs) for path in sorted(results.glob("*.json")))


def prepare(configs, tokenizers: Path, out: Path) -> None:
    """Build the token cache the text runs share, say what the corpus holds, and refuse a budget that
    would read it more than twice. The BPE tokenizers under ``tokenizers`` (those earlier pieces handed back) are
    loaded instead of trained; a tokenizer trained here comes back as ``out/tokenizer-<entry>.json``."""
    from psattn.experiments.studies.text_scale import check_repeats
    from psattn.files import write_bytes
    from psattn.textdata.corpus import describe_corpus
    from psattn.textdata.tokens import cache_root

    texts = [c for c in configs if getattr(c.task, "tokens", None) is not None]
    if not texts:
        return
    kept = cache_root() / "tokenizers"
    for tokenizer in sorted(tokenizers.glob("*.json")):  # seeded into this machine's cache
        if not (kept / tokenizer.name).exists():
            kept.mkdir(parents=True, exist_ok=True)
            write_bytes(kept / tokenizer.name, tokenizer.read_bytes())  # whole: one cut short would stay there
    config = max(texts, key=lambda c: c.train.steps * c.train.batch_size)
    start = time.monotonic()
    corpus = config.task.tokens()  # built on a fresh machine: part of every piece's time
    ready = time.monotonic() - start
    times = check_repeats(len(corpus.train), config)
    loaded = (tokenizers / f"{corpus.directory.name}.json").exists()
    print(f"corpus: {describe_corpus(config.task.corpus)}; {len(corpus.train):,} training tokens, {len(corpus.eval):,} "
          f"held-out, tokenized or opened in {ready:.0f} s{' (its tokenizer loaded, not trained)' * loaded}; "
          f"the largest budget reads it {times:.2f} times", flush=True)
    if corpus.tokenizer.kind == "bpe" and not loaded:
        back = out / f"tokenizer-{corpus.directory.name}.json"
        out.mkdir(parents=True, exist_ok=True)
        write_bytes(back, (corpus.directory / "tokenizer.json").read_bytes())
        print(f"its BPE tokenizer comes back as {back.name}: unpack it here, and the next pieces load it instead of "
              "training it", flush=True)


def run(args: argparse.Namespace) -> int:
    """One piece; a stop signal at any moment, between runs too, still packs what the piece finished."""
    from psattn.training.signals import TrainingInterrupted, on_stop_signals

    def stop(signum, _frame):  # where no run is training (a run's own handler checkpoints it first)
        raise TrainingInterrupted(f"{signal.Signals(signum).name}, where no run was training", signum)

    try:
        with on_stop_signals(stop):
            return _run(args)
    except TrainingInterrupted as err:
        print(f"gpu_sweeps: stopped by {err}", file=sys.stderr)
        return 128 + err.signum


def _run(args: argparse.Namespace) -> int:
    from psattn.cli import main as psattn

    start = time.monotonic()
    mode = "quick" if args.smoke else "full"
    out = Path(args.out)
    folder = results_folder(args.experiment)
    results = Path(args.results) if args.results else (out / "results" if args.smoke else RESULTS) / folder
    runs = Path(args.runs) if args.runs else (out / "runs" if args.smoke else ROOT / "gpu_runs") / folder
    configs = _experiment(args.experiment)(mode)
    if not args.smoke:
        import torch

        if not torch.cuda.is_available():
            print(f"gpu_sweeps: {args.experiment} needs a CUDA device (--smoke runs its tiny plan on the CPU)", file=sys.stderr)
            return 2
    restored = restore_saved(results, runs)
    print(f"{args.experiment} ({mode}): {len(configs)} runs declared; {restored} restored from {results}", flush=True)
    try:
        prepare(configs, results.parent / TOKENIZERS, out)
    except ValueError as err:
        print(f"gpu_sweeps: {err}", file=sys.stderr)
        return 2
    left = args.time_limit - (time.monotonic() - start)
    code = 0
    try:  # whatever ends the sweep (a diverged run, an error, a SIGTERM), the runs it finished are packed
        if left > 0:
            code = psattn(["sweep", args.experiment, f"--{mode}", "--out", str(runs), "--time-limit", str(left),
                           "--workers", str(args.workers), "-q"])
    finally:
        from psattn.training.signals import stop_signals_held

        with stop_signals_held():  # packing is not cut halfway: a stop that comes meanwhile is handled after it
            archive = _pack_finished(configs, results, runs, out, args.experiment)
            _split_in_progress(configs, runs, out, args.experiment)
    if args.smoke and code == 0:  # the other half of the round trip: unpack, then rebuild the tables from the summaries
        unpack_into(archive, results.parent)
        for tokenizer in sorted(out.glob("tokenizer-*.json")):
            keep_tokenizer(tokenizer, results.parent)
        print_tables(args.experiment, results, mode)
    return code


def _pack_finished(configs, results: Path, runs: Path, out: Path, experiment: str) -> Path:
    """Summarise every run finished under ``runs`` but not yet saved in ``results`` into one archive,
    ``out/EXPERIMENT.tar.gz``, deleting their checkpoints."""
    from psattn.experiments.saved_runs import pack, write_summary
    from psattn.training.run_dir import load_result

    saved = {p.stem for p in results.glob("*.json")}
    new = [c.name for c in configs if c.name not in saved and load_result(runs / c.name) is not None]
    staging = runs.parent / f"{runs.name}-summaries"
    shutil.rmtree(staging, ignore_errors=True)
    paths = [write_summary(runs / name, staging) for name in new]
    archive = pack(paths, out / f"{experiment}.tar.gz", results_folder(experiment))
    for name in new:  # once their summaries are packed
        (runs / name / "checkpoint.pt").unlink(missing_ok=True)
    held = sum(c.name in saved for c in configs)  # the pilot's folder holds text_scale's other runs too
    print(f"{len(new)} newly finished runs packed into {archive}; "
          f"{held + len(new)} of {len(configs)} now saved or packed", flush=True)
    return archive


def _split_in_progress(configs, runs: Path, out: Path, experiment: str) -> None:
    """Each run the piece left in progress (a checkpoint, no result) as parts in ``out`` small enough to come
    back (``psattn.experiments.run_parts``), so that the next piece, on another machine, resumes it."""
    from psattn.experiments.run_parts import BYTES_BACK, FILES_BACK, MAX_PARTS, PART_BYTES, split_run
    from psattn.training.checkpoint import load_checkpoint
    from psattn.training.run_dir import load_result

    left = [c for c in configs if (runs / c.name / "checkpoint.pt").exists() and load_result(runs / c.name) is None]
    steps = {c.name: load_checkpoint(runs / c.name / "checkpoint.pt", keys=("step",))["step"] for c in left}
    left.sort(key=lambda c: -steps[c.name])  # what room there is goes to the runs furthest on
    for i, config in enumerate(left):
        run_dir, step = runs / config.name, steps[config.name]
        stem = f"{experiment}-in-progress" + (f"-{i}" if i else "")
        held = [p for p in out.iterdir() if p.is_file()] if out.is_dir() else []  # on a GPU, all a piece writes there
        room = min(FILES_BACK - 1 - len(held),  # one file kept for a log
                   (BYTES_BACK - 2**20 - sum(p.stat().st_size for p in held)) // PART_BYTES)
        parts = split_run(run_dir, out, stem, max_parts=min(MAX_PARTS, room)) if room > 0 else []
        where = f"{run_dir.parent.name}/{run_dir.name}"
        if parts:
            print(f"{config.name} is in progress (step {step} of {config.train.steps}): its run directory comes back in "
                  f"{len(parts)} part{'s' * (len(parts) > 1)}, {stem}.tar.*; unpack them here and carry gpu_runs/{where} "
                  "to the next piece", flush=True)
        else:
            print(f"{config.name} is in progress (step {step} of {config.train.steps}), too large to come back beside "
                  "what the piece hands back already: the next machine starts it again", flush=True)


def unpack_into(archive: Path, into: Path, *, declared_only: bool = False, runs: Path | None = None) -> None:
    """The summaries of ``archive`` into ``into/<folder>/``; with ``declared_only`` (into docs/results/gpu) an
    archive holding a run that no GPU sweep's full plan declares (a ``--smoke`` piece's) is refused first. With
    ``runs`` (gpu_runs), the checkpoint a run now finished left there in progress is deleted."""
    import tarfile

    from psattn.experiments.at_scale import GPU_SWEEPS as SAVED
    from psattn.experiments.saved_runs import unpack

    if declared_only:
        declared = {folder: {c.name for c in study.plan("full")} for study, folder in SAVED.values()}
        with tarfile.open(archive, "r:gz") as tar:
            members = [name.split("/") for name in tar.getnames()]
        strays = [m[-1].removesuffix(".json") for m in members if len(m) != 2 or m[1][:-5] not in declared.get(m[0], ())]
        if strays:
            raise ValueError(f"{archive} holds {len(strays)} runs no GPU sweep's full plan declares, such as {strays[0]} "
                             f"(a --smoke piece's?): {into} keeps the declared runs alone; give --into another folder")
    paths = unpack(archive, into)
    print(f"unpacked {len(paths)} run summaries into {into}")
    if runs is not None:  # a copy of a finished run's progress, joined from an earlier piece, is carried no more
        for path in paths:
            checkpoint = runs / path.parent.name / path.stem / "checkpoint.pt"
            if checkpoint.exists():
                checkpoint.unlink()
                print(f"{path.stem} is finished: deleted {checkpoint}, so that it is not carried to the next piece")


def is_tokenizer(path: Path) -> bool:
    """Whether ``path`` is named as the BPE tokenizer a piece hands back (``prepare``)."""
    return path.name.startswith("tokenizer-") and path.suffix == ".json"


def keep_tokenizer(path: Path, into: Path) -> Path:
    """The BPE tokenizer a piece trained and handed back, checked and kept as ``into/tokenizers/<entry>.json``, where
    later pieces load it from (``prepare``)."""
    from psattn.files import write_bytes
    from psattn.textdata.tokenizer import load_tokenizer

    if load_tokenizer(path).kind != "bpe":
        raise ValueError(f"{path} is not a BPE tokenizer")
    kept = into / TOKENIZERS / path.name.removeprefix("tokenizer-")
    write_bytes(kept, path.read_bytes())  # whole (psattn.files): a copy cut short keeps the one already there
    print(f"kept the BPE tokenizer {path.name} as {kept}: the next pieces load it instead of training it")
    return kept


def join_parts(parts: list[Path], runs: Path, results: Path) -> Path | None:
    """A run in progress, from the parts a piece handed back, into ``runs/<results folder>/<run>``; None, and the
    run directory left as it is, when the run is finished (its summary is under ``results``, or its directory
    holds its result) or its directory there holds a later step than the parts (an older piece's, unpacked late)."""
    from psattn.experiments.run_parts import PART_NAME, join_run
    from psattn.training.checkpoint import load_checkpoint
    from psattn.training.run_dir import load_result

    stem = PART_NAME.match(parts[0].name)["stem"]  # type: ignore[index]  # is_part checked the names
    experiment = stem.split("-in-progress")[0]
    if experiment not in GPU_SWEEPS:
        raise ValueError(f"{parts[0]} is not a part of a GPU sweep's run in progress ({', '.join(GPU_SWEEPS)})")
    folder = results_folder(experiment)
    with tempfile.TemporaryDirectory() as scratch:  # what the parts hold, before anything here is replaced
        joined = join_run(parts, scratch)
        name, step = joined.name, load_checkpoint(joined / "checkpoint.pt", keys=("step",))["step"]
    run_dir = runs / folder / name
    if (results / folder / f"{name}.json").exists() or load_result(run_dir) is not None:
        print(f"skipped {stem}: {name} is finished (its summary is in {results / folder} or its result in {run_dir})")
        return None
    if (run_dir / "checkpoint.pt").exists():
        held = load_checkpoint(run_dir / "checkpoint.pt", keys=("step",))["step"]
        if held > step:
            print(f"skipped {stem} (step {step}): {run_dir} holds step {held} already, from a later piece")
            return None
    run_dir = join_run(parts, runs / folder)
    shown = run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir
    print(f"joined {len(parts)} part{'s' * (len(parts) > 1)} into {run_dir} (step {step}); carry {shown} to the next "
          "piece on a GPU")
    return run_dir


def print_tables(experiment: str, results: Path, mode: str) -> None:
    from psattn.experiments import at_scale

    print("\n".join(at_scale.section(results_folder(experiment), results, mode)))


#: the hidden folder inside docs/figures that ``page`` draws its figures into (then a process id)
PAGE_STAGING = ".gpu-sweeps-page-"


def page(args: argparse.Namespace) -> int:
    """The page rewritten and its figures drawn as one set: the figures into a staging folder inside the page's
    figures/, then moved in and the page written whole (``psattn.files``) with the stop signals held, so that a
    stop or a full disk midway leaves the earlier page with its own figures. A staging folder a killed run left
    is removed."""
    from psattn.experiments import at_scale
    from psattn.files import write_texts
    from psattn.processes import tidy_staging

    path, results = Path(args.page), Path(args.results)
    text = at_scale.render_page(path.read_text(), results)
    figures = path.parent / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    tidy_staging(figures, PAGE_STAGING)
    staging = Path(tempfile.mkdtemp(prefix=f"{PAGE_STAGING}{os.getpid()}-", dir=figures))
    try:
        drawn = [figures / p.name for p in at_scale.figures(results, staging)]
        write_texts({path: text}, replacing=partial(_moved_in, staging, figures))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"rewrote {path}; figures: {', '.join(map(str, drawn)) or 'none (no saved runs)'}")
    return 0


@contextlib.contextmanager
def _moved_in(staging: Path, folder: Path):
    """Hold the stop signals while the page is renamed into place, the figures in ``staging`` moved into ``folder``
    first, and ``staging`` removed before a stop held meanwhile ends the process."""
    from psattn.training.signals import stop_signals_held

    with stop_signals_held():
        for figure in sorted(staging.iterdir()):
            os.replace(figure, folder / figure.name)
        staging.rmdir()
        yield


def status(args: argparse.Namespace) -> int:
    from psattn.experiments import at_scale

    for line in at_scale.progress_lines(args.experiment, Path(args.results) if args.results else RESULTS):
        print(line)
    return 0


def _said(what: Path, unpacking, *args) -> bool:
    """Whether ``unpacking(*args)`` refused ``what`` (a file it was given: cut short, corrupt, a part missing),
    which it then says in one line; the other files go on."""
    import tarfile

    try:
        unpacking(*args)
    except (ValueError, tarfile.TarError, EOFError, OSError) as err:
        print(f"gpu_sweeps: error: {err}" if what.name in str(err) else f"gpu_sweeps: error: {what}: {err}",
              file=sys.stderr)
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run one piece of a GPU sweep and pack its finished runs")
    r.add_argument("experiment", choices=GPU_SWEEPS)
    r.add_argument("--time-limit", type=float, default=420.0, help="seconds from the start, then stop cleanly")
    r.add_argument("--out", default="gpu_sweeps_out", help="where the archive goes ($OUT on the GPU machine)")
    r.add_argument("--results", help="the saved summaries (default docs/results/gpu/<experiment>)")
    r.add_argument("--runs", help="the run directories (default gpu_runs/<experiment>)")
    r.add_argument("--workers", type=int, default=1,
                   help="runs trained at a time, each in its own process, all sharing the GPU (default 1)")
    r.add_argument("--smoke", action="store_true", help="the quick plan on the CPU, everything under --out")
    u = sub.add_parser("unpack", help="put a piece's archive into docs/results/gpu, and a run in progress into gpu_runs")
    u.add_argument("files", nargs="+",
                   help="the piece's EXPERIMENT.tar.gz, its tokenizer-*.json, and the parts of a run in progress")
    u.add_argument("--into", default=str(RESULTS))
    u.add_argument("--runs", default=str(ROOT / "gpu_runs"), help="where a run in progress goes (git-ignored)")
    p = sub.add_parser("page", help="rewrite docs/at_scale.md's results and figures from docs/results/gpu")
    p.add_argument("--page", default=str(ROOT / "docs" / "at_scale.md"))
    p.add_argument("--results", default=str(RESULTS))
    s = sub.add_parser("status", help="how many of an experiment's runs are saved, and what is left")
    s.add_argument("experiment", choices=GPU_SWEEPS)
    s.add_argument("--results", help="the folder of saved summaries (default docs/results/gpu)")
    args = parser.parse_args(argv)
    if args.command == "run" and args.workers < 1:
        parser.error(f"--workers must be at least 1, not {args.workers}")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.command == "unpack":
        from psattn.experiments.run_parts import is_part

        files = [Path(f) for f in args.files]
        for missing in (f for f in files if not f.is_file()):
            parser.error(f"{missing} is not a file: give the piece's archive and the parts of its run in progress")
        failed = 0
        for tokenizer in (f for f in files if is_tokenizer(f)):
            failed += _said(tokenizer, keep_tokenizer, tokenizer, Path(args.into))
        for archive in (f for f in files if not is_part(f) and not is_tokenizer(f)):
            failed += _said(archive, partial(unpack_into, declared_only=Path(args.into).resolve() == RESULTS.resolve(),
                                             runs=Path(args.runs)), archive, Path(args.into))
        parts = [f for f in files if is_part(f)]
        by_stem: dict[tuple[Path, str], list[Path]] = {}  # one piece's parts lie in one folder
        for part in parts:
            by_stem.setdefault((part.parent, part.name.split(".tar.")[0]), []).append(part)
        for group in by_stem.values():
            failed += _said(group[0], join_parts, group, Path(args.runs), Path(args.into))
        return 1 if failed else 0
    return {"run": run, "page": page, "status": status}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
