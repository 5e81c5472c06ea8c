"""The "At scale (GPU)" page's tables, built from the GPU sweeps' saved summaries (``docs/results/gpu``).

Each GPU sweep has a folder of run summaries (``saved_runs``), filled piece by piece. ``section`` gives
an experiment's part of the page: where and when its runs trained, its figure, table and verdict, or,
while none has run, the command that runs it and the time it needs; ``render_page`` writes every
section (and the status table) between its markers in the page (``<!-- results: NAME -->`` ...
``<!-- end results: NAME -->``) and ``figures`` draws the figures the sections show;
``progress_lines`` counts what is saved against what is declared; ``glance_rows`` gives the README's
glance rows, once real GPU numbers exist.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from psattn.experiments.declared import STUDIES
from psattn.experiments.saved_runs import load_summaries
from psattn.experiments.studies import paper_scale, text_scale
from psattn.experiments.studies.text import tokens_per_seed

#: experiment -> (its declaration, its folder under docs/results/gpu); the text pilot's runs are text_scale's own
GPU_SWEEPS = {"paper_scale": (STUDIES["paper_scale"], "paper_scale"),
              "text_scale": (STUDIES["text_scale"], "text_scale")}
COMMAND = "benchmarks/gpu_sweeps.sh {experiment}"


def _provenance(results: dict[str, dict[str, Any]]) -> str:
    """One sentence: the devices, dates and git revisions the runs were trained at."""
    metas = [r.get("meta") or {} for r in results.values()]
    devices = sorted({r.get("device") or "an unrecorded device" for r in results.values()})
    days = sorted({(m.get("started") or "?")[:10] for m in metas})
    revisions = sorted({m["git_revision"][:7] if m.get("git_revision") else "unrecorded" for m in metas})
    torch = sorted({m.get("torch_version") or "?" for m in metas})
    return (f"{len(results)} runs, trained on {', '.join(devices)} on {', '.join(days)} at git "
            f"{', '.join(revisions)} (torch {', '.join(torch)}).")


def _corpus(results: dict[str, dict[str, Any]]) -> str:
    """One sentence per distinct corpus the text runs read: files, bytes, digest, tokens, repeats."""
    seen: dict[str, tuple[dict[str, Any], float | None]] = {}
    for r in sorted(results.values(), key=lambda r: r.get("diverged_at") is not None):  # a diverged run's tokens end early
        corpus = r.get("corpus") or {}
        seen.setdefault(corpus.get("files_sha256", "unrecorded"),
                        (corpus, None if r.get("diverged_at") is not None else text_scale.repeats(r)))
    return " ".join(
        f"Corpus {digest}: {c.get('files', '?'):,} files, {c.get('bytes', 0) / 1e6:.0f} MB, {c.get('train_tokens', 0):,} "
        f"training and {c.get('eval_tokens', 0):,} held-out tokens (held out by file), read "
        f"{'?' if times is None else f'{times:.2f}'} times by a run's budget." for digest, (c, times) in seen.items())


def _where(results: dict[str, dict[str, Any]]) -> str:
    """"NVIDIA H200, 2026-12-05, git 1234567": where and when the runs trained, for a glance row."""
    metas = [r.get("meta") or {} for r in results.values()]
    devices = sorted({r.get("device") or "?" for r in results.values()})
    days = sorted({(m.get("started") or "?")[:10] for m in metas})
    revisions = sorted({(m.get("git_revision") or "?")[:7] for m in metas})
    return f"{', '.join(devices)}, {', '.join(days)}, git {', '.join(revisions)}"


#: a GPU sweep that saves its runs in another's folder: the text pilot's runs are text_scale's own
PILOTS = {"text_scale_pilot": "text_scale"}


def progress_lines(experiment: str, results_root: Path) -> list[str]:
    """How many of ``experiment``'s declared (full-plan) runs are saved under ``results_root`` (of the pilot,
    ``text_scale_pilot``, its own runs, in text_scale's folder)."""
    folder = GPU_SWEEPS[PILOTS.get(experiment, experiment)][1]
    names = [c.name for c in STUDIES[experiment].plan("full")]
    saved = {p.stem for p in (Path(results_root) / folder).glob("*.json")}
    left = [n for n in names if n not in saved]
    return [f"{experiment}: {len(names) - len(left)} of {len(names)} declared runs saved in {Path(results_root) / folder}",
            *(f"  left: {n}" for n in left)]


def not_run(experiment: str) -> list[str]:
    """What the page says for an experiment none of whose runs has been saved yet."""
    configs = GPU_SWEEPS[experiment][0].plan("full")
    if experiment == "paper_scale":
        low, high = paper_scale.expected_minutes()
        step_ms = f"{paper_scale.H200_STEP_S[0] * 1e3:.0f}–{paper_scale.H200_STEP_S[1] * 1e3:.0f} ms"
        cost = (f"about {low:.0f}–{high:.0f} minutes of H200 training for the psa-92m runs (at the {step_ms} a "
                "step measured there, timed from the first step to the last with an evaluation every 50 steps in "
                "between; with the emergence steps of the first H200 runs and every other run at its cap; this sweep "
                "evaluates every 25 steps, which costs more), and less for psa-20m, whose step time has not been "
                "measured")
        commands = f"`{COMMAND.format(experiment=experiment)}`"
    else:
        low, high = text_scale.expected_minutes()
        deepest = text_scale.scale_plan("full")
        deepest = dataclasses.replace(deepest, depths=(max(deepest.depths),), seeds=(0,))
        one = [m / len(text_scale.VARIANTS) for m in text_scale.expected_minutes(deepest)]
        cost = (f"about {low:.0f}–{high:.0f} minutes of H200 training steps, extrapolated from psa-92m's step time "
                "per layer (not measured on these models; the 42 evaluations a run and building the corpus on each "
                f"fresh machine come on top; a four-layer run, {one[0]:.0f}–{one[1]:.0f} minutes by the same "
                "extrapolation, may take two pieces, its run directory carried from one to the next)")
        commands = (f"`{COMMAND.format(experiment='text_scale_pilot')}` (the plain model of every depth, whose phase "
                    f"changes say whether the budget is well past them), then `{COMMAND.format(experiment=experiment)}`")
    return [f"**Not run yet.** No `{experiment}` run has been saved: its {len(configs)} runs need a GPU, "
            f"{cost}, in commands of at most 9 minutes each: {commands} on the "
            "GPU machine, then `python benchmarks/gpu_sweeps.py unpack` on its archive, once per piece."]


#: experiment -> its figure's file name (under the page's figures/ folder)
FIGURES = {"paper_scale": "paper_scale.png", "text_scale": "text_scale.png"}


def figures(results_root: Path, out_dir: Path) -> list[Path]:
    """Draw the figure of every GPU sweep with saved runs into ``out_dir`` (needs matplotlib)."""
    drawn = []
    for experiment, (_, folder) in GPU_SWEEPS.items():
        saved = load_summaries(Path(results_root) / folder)
        if not saved:
            continue
        path = Path(out_dir) / FIGURES[experiment]
        figure = (paper_scale.scale_figure(saved, path) if experiment == "paper_scale"
                  else text_scale.scale_figure(saved, path))
        if figure is not None:  # None: every saved run diverged
            drawn.append(figure)
    return drawn


def status_lines(results_root: Path) -> list[str]:
    """The page's table of the GPU sweeps and how far each has run."""
    lines = ["| sweep | what it trains | status |", "|---|---|---|"]
    what = {"paper_scale": "psa-92m and psa-20m on induction, the paper's γ grid, 3 seeds",
            "text_scale": "1, 2 and 4 layers with MLPs on real text, plain and PSA, 2 seeds"}
    for experiment, (study, folder) in GPU_SWEEPS.items():
        saved, declared = len(load_summaries(Path(results_root) / folder)), len(study.plan("full"))
        status = "not run yet" if not saved else "done" if saved >= declared else f"{saved} of {declared} runs"
        name = f"`psattn sweep {experiment} --full`" + (" (its pilot: `text_scale_pilot`)" if experiment == "text_scale" else "")
        lines.append(f"| {name} | {what[experiment]} | {status} |")
    return lines


def render_page(text: str, results_root: Path) -> str:
    """``text`` (the page) with every marked block rewritten from the summaries under ``results_root``."""
    blocks = {"status": status_lines(results_root),
              **{e: section(e, Path(results_root) / folder) for e, (_, folder) in GPU_SWEEPS.items()}}
    for name, lines in blocks.items():
        start, end = f"<!-- results: {name} -->", f"<!-- end results: {name} -->"
        if start not in text or end not in text:
            raise ValueError(f"the page has no block {start} ... {end}")
        before, rest = text.split(start, 1)
        text = "\n".join([before + start, *lines, end + rest.split(end, 1)[1]])
    return text


def section(experiment: str, results: Path, mode: str = "full") -> list[str]:
    """The page's lines for ``experiment``, from the summaries in the folder ``results`` (of ``mode``'s plan)."""
    saved = load_summaries(results)
    study = GPU_SWEEPS[experiment][0]
    if not saved and mode != "full":  # not_run's runs, minutes and commands are the full plan's
        return [f"No `{experiment}` run of the {mode} plan has been saved: its {len(study.plan(mode))} runs have not run."]
    if not saved:
        return not_run(experiment)
    lines = [_provenance(saved), "", f"![{experiment}](figures/{FIGURES[experiment]})", ""]
    if experiment == "text_scale":
        lines += [_corpus(saved), "", "The pilot (the plain model of every depth, its first seed):", "",
                  *text_scale.pilot_table(saved), ""]
    assert study.table is not None and study.verdict is not None  # both GPU sweeps have them
    lines += [*study.table(saved), "", *[part for clause in study.verdict(saved) for part in (clause, "")]]
    declared = len(study.plan(mode))
    if len(saved) < declared:
        lines.append(f"{len(saved)} of the {declared} declared runs have run; the rest have not.")
    return lines


def glance_rows(results_root: Path) -> list[str]:
    """The README's glance rows of the GPU sweeps that have saved runs (none before they run)."""
    rows = []
    saved = load_summaries(Path(results_root) / "paper_scale")
    if saved:
        table = {(r["size"], r["form"], r["variant"], r["gamma"]): r for r in paper_scale.scale_table(saved)}
        cells = []
        for gamma in (0.8, 0.0):
            r = table.get(("psa-92m", "all_positions", "symmetric" if gamma else "baseline", gamma))
            if r is not None:
                step = "—" if r["mean_emergence_step"] is None else f"~{r['mean_emergence_step']:,.0f}"
                diverged = sum(d is not None for d in r["diverged_at"])
                cells.append(f"γ = {gamma:g} {r['successes']}/{len(r['seeds'])} at {step}"
                             + (f" ({diverged} diverged)" if diverged else ""))
        if cells:
            rows.append(f"| the phase transition at the paper's scale (`psattn sweep paper_scale --full`: psa-92m, "
                        f"symmetric, full form; {_where(saved)}; [At scale](docs/at_scale.md)) | {'; '.join(cells)} | "
                        f"{paper_scale.PAPER_SIZE}: γ = 0.8 3/3 at ~717; γ = 0 2/3 at ~2700 |")
    saved = load_summaries(Path(results_root) / "text_scale")
    if saved:
        by = {(r["layers"], r["variant"]): r for r in text_scale.scale_table(saved)}
        cells = []
        for depth in (2, 4):
            plain, psa = by.get((depth, "baseline")), by.get((depth, "key_only"))
            if plain is None or psa is None:
                continue
            cells.append(f"{depth} layers: key-only {psa['bits_per_byte'][0]:.3f} bits per byte against plain "
                         f"{plain['bits_per_byte'][0]:.3f}, phase change at {tokens_per_seed(psa['phase_change'])} "
                         f"against {tokens_per_seed(plain['phase_change'])} tokens")
        diverged = len(saved) - len(text_scale.trained_through(saved))
        if cells and diverged:
            cells.append(f"{diverged} run{'s' * (diverged > 1)} diverged, left out")
        if cells:
            rows.append("| real text with MLPs past the phase change (`psattn sweep text_scale --full`: 1, 2, 4 layers, "
                        f"d_model 256, context 256; {_where(saved)}; [At scale](docs/at_scale.md)) | {'; '.join(cells)} | — |")
    return rows
