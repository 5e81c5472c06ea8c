"""Command-line entry points of the theory (``psattn.theory``): ``psattn certify`` and ``psattn theory ...``.

``register(subparsers)`` adds them to the main parser; heavy imports (SymPy, matplotlib, the
trainer) happen inside the commands, so building the parser stays cheap. They live here, not in
``psattn.theory``, because the report trains a model (whose post-RoPE Bode response, like any
model's, is the closed form: the plot checks the filter's implementation, not what training learned).

- ``psattn certify [--json [PATH]] [--details] [--operator NAME] [--only NAME ...]``: run the
  certificates, print a table (or JSON), exit 1 if any fails. ``--operator wrong_sign`` etc. certifies a broken
  operator, to see the certificates fail.
- ``psattn theory report --out DIR [--quick|--full] [--run-dir RUN] [--sweep FILE]``: the whole theory
  section (figures, theory.json, theory.md).
- ``psattn theory phase-diagram --out DIR [--samples N]``: closed form against the simulation (default
  folder ``reports/theory-phase-diagram``).
- ``psattn theory bode --out DIR [--gamma G] [--run-dir RUN]``: closed-form and measured Bode plots
  (measured on a random-initialised model unless ``--run-dir``; either gives the closed form; default folder
  ``reports/theory-bode``).

Each has a folder of its own, and refuses one that holds a theory report (its ``theory.md``): their
figures have the report's names, and the report's text describes its own.
- ``psattn theory gamma-c --d-k D [D ...] --context T [T ...]``: evaluate the law.
- ``psattn theory fit-exponent FILE``: fit gamma_critical ∝ d_k^alpha to saved sweep results.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from pathlib import Path

from psattn.arguments import add_command, add_deprecated, add_json, add_plan_size, same_file, seed_int, write_json_output
from psattn.files import write_text


def cmd_certify(args: argparse.Namespace) -> int:
    from psattn.theory.operators import get_operator

    operator = get_operator(args.operator)  # a bad name is refused before SymPy loads
    from psattn.theory.certificates import format_table, run_certificates

    results = run_certificates(operator, args.only)
    if args.json != "-":
        print(format_table(results, details=args.details))
    if args.json:
        write_json_output(args.json, [r.to_dict() for r in results])
    return 0 if all(r.passed for r in results) else 1


def cmd_report(args: argparse.Namespace) -> int:
    from psattn.experiments.bode_model import bode_model
    from psattn.theory import plots  # noqa: F401  (matplotlib: a missing one is told before the Bode run trains into --out)
    from psattn.theory.report import theory_report
    from psattn.theory.scaling import load_sweep_results
    from psattn.training.signals import stop_signals_held

    quick = args.mode == "quick"
    sweep = None if args.sweep is None else load_sweep_results(args.sweep)  # before the training: a bad file fails first
    model, label = bode_model(args.out, quick=quick, run_dir=args.run_dir, seed=args.seed)
    result = theory_report(args.out, model, label, quick=quick, sweep_results=sweep, seed=args.seed,
                           moving=stop_signals_held)  # the moves are not cut halfway
    print(f"theory report: {Path(args.out) / 'theory.md'} ({result['seconds']:.0f} s)")
    return 0


def refuse_a_theory_report(out: Path, figures: tuple[str, ...]) -> None:
    """Refuse an output folder that holds a theory report: ``figures`` would replace the report's own
    (a Bode plot at another γ under its "γ = 0.8" text)."""
    if (out / "theory.md").exists():
        raise ValueError(f"{out} holds a theory report (theory.md), whose {' and '.join(figures)} this would "
                         "replace: name another --out folder")


#: the hidden folder inside ``--out`` that ``theory bode`` and ``theory phase-diagram`` write into (then a process id)
STAGING_PREFIX = ".theory-files-"


def staged_in(out: Path) -> contextlib.AbstractContextManager[Path]:
    """A staging folder inside ``out`` for the block to write its files into, moved into ``out`` with the stop
    signals held once the block has written all (``psattn.processes.staged_folder``)."""
    from psattn.processes import staged_folder
    from psattn.training.signals import stop_signals_held

    return staged_folder(out, STAGING_PREFIX, stop_signals_held)


def cmd_phase_diagram(args: argparse.Namespace) -> int:
    from psattn.theory import plots
    from psattn.theory.reduced_model import compare_with_theory
    from psattn.theory.report import GRID_DK, GRID_T

    out = Path(args.out)
    refuse_a_theory_report(out, ("phase_diagram.png",))
    comparison = compare_with_theory(GRID_DK, GRID_T, n_samples=args.samples, seed=args.seed).to_dict()
    with staged_in(out) as staging:  # once the simulation has succeeded: a failure leaves no folder
        write_text(staging / "transition.json", json.dumps(comparison, indent=1))
        plots.plot_phase_diagram(json.loads((staging / "transition.json").read_text()), staging / "phase_diagram.png")
    for region in ("above_crossover", "below_crossover", "all"):
        s = comparison["stats"][region]
        r = "n/a" if s["pearson_r"] is None else f"{s['pearson_r']:.4f}"
        err = "n/a" if s["max_rel_error"] is None else f"{s['max_rel_error']:.3f}"
        print(f"{region:16s} points {s['points']:3d}  with transition {s['with_transition']:3d}  "
              f"Pearson r {r}  largest relative error {err}")
    print(f"figure: {out / 'phase_diagram.png'}")
    return 0


def _bode_note(config) -> str:
    """What the measured response of a layer with attention ``config`` shows."""
    if config.is_key_lag:
        return (f"(layer 1 is the key-lag baseline {config.variant!r}: its learned filter mixes the keys before the hook "
                "points, which see no shear, so the response of 1 measured here says nothing of that filter)")
    if config.placement != "post_rope":
        return ("(this run shears before RoPE, which then turns each position by its own angle: the response of the "
                "post-RoPE stream is not the closed form's)")
    return ("(after RoPE the shear is a fixed linear filter of the stream: the measured response is the closed form "
            "for any weights, so this checks the implementation of the filter)")


def cmd_bode(args: argparse.Namespace) -> int:
    import torch

    from psattn.theory.spectral import all_variant_bode, measure_bode

    out = Path(args.out)
    refuse_a_theory_report(out, ("bode.png", "bode_measured.png"))
    closed = [c.to_dict() for c in all_variant_bode(args.gamma)]
    if args.run_dir:  # read before anything is written: a run directory that fails leaves --out as it was
        from psattn.training.run_dir import load_trained

        model, label = load_trained(args.run_dir), f"trained run {Path(args.run_dir).name}"
    else:
        from psattn.models import AttentionConfig, DecoderLM, ModelConfig

        torch.manual_seed(args.seed)
        model = DecoderLM(ModelConfig(vocab_size=64, d_model=128, n_layers=1, n_heads=4,
                                      attention=AttentionConfig("symmetric", args.gamma))).eval()
        label = f"symmetric γ={args.gamma:g}, random initialisation"
    from psattn.theory import plots  # matplotlib: loaded once the run directory has been read

    with staged_in(out) as staging:
        plots.plot_bode(closed, staging / "bode.png")
        g = torch.Generator().manual_seed(args.seed)
        ids = torch.randint(0, model.config.vocab_size, (32, 64), generator=g, device=g.device)  # (B, T)
        measured = measure_bode(model, ids).to_dict(label)
        write_text(staging / "bode.json", json.dumps({"closed_form": closed, "measured": [measured]}, indent=1))
        plots.plot_measured_bode([measured], staging / "bode_measured.png")
    figures = [out / "bode.png", out / "bode_measured.png"]
    for stream in ("key", "query", "joint"):
        r = measured[f"{stream}_r"]
        print(f"{stream:6s} measured vs closed form: Pearson r {'n/a' if r is None else f'{r:.5f}'}, "
              f"largest relative error {measured[f'{stream}_max_rel_error']:.4f}, "
              f"largest phase error {measured[f'{stream}_max_phase_error']:.4f} rad")
    print(_bode_note(model.blocks[0].attn.config))
    print("figures: " + ", ".join(str(f) for f in figures))
    return 0


def cmd_gamma_c(args: argparse.Namespace) -> int:
    from psattn.theory.transition import crossover_dk, gamma_c, transition_branch

    if not getattr(args, "context", None):
        raise ValueError("--context T [T ...] is required")
    for T in args.context:
        for d_k in args.d_k:
            print(f"d_k={d_k:g} T={T:g}: gamma_c={gamma_c(d_k, T, args.c):.6f} "
                  f"(branch {transition_branch(d_k, T)}, crossover d_k*={crossover_dk(T):.3f})")
    return 0


def cmd_fit_exponent(args: argparse.Namespace) -> int:
    from psattn.theory.scaling import empirical_exponent, load_sweep_results

    if same_file(args.json, args.file):
        raise ValueError(f"--json {args.json} would replace the sweep results it fits: name another file")
    fit = empirical_exponent(load_sweep_results(args.file))
    if args.json:
        write_json_output(args.json, fit.to_dict())
    if args.json != "-":
        spread = f"± {fit.stderr:.4f}" if math.isfinite(fit.stderr) else "no standard error from two points"
        print(f"gamma_critical ∝ d_k^{fit.exponent:.4f} ({spread}), R² {fit.r_squared:.4f}, "
              f"{fit.n} points over d_k {fit.x_min:g}–{fit.x_max:g}, {fit.dropped} dropped (paper: about -1.13)")
    return 0


def register(subparsers) -> None:
    """Add ``certify`` and ``theory`` to the main parser's subcommands."""
    cert = add_command(subparsers, "certify", "run the machine-checkable certificates of the PSA claims",
                       "Run the certificates (symbolic with SymPy, numeric on random inputs); print a table, "
                       "exit 1 if any fails.")
    add_json(cert, "the results")
    cert.add_argument("--details", action="store_true", help="show every sub-check, not only failures")
    cert.add_argument("--operator", default="psa",
                      help="operator under test: psa or a broken one (wrong_sign, look_ahead, pre_rope, "
                           "raw_key_cache, recompute_cache, swapped_law), to see the certificates fail")
    cert.add_argument("--only", nargs="+", metavar="NAME", help="run only these certificates")
    cert.set_defaults(func=cmd_certify)

    theory = add_command(subparsers, "theory", "critical-coupling law, reduced model, spectra")
    sub = theory.add_subparsers(dest="theory_command", required=True, metavar="COMMAND")

    rep = add_command(sub, "report", "figures, theory.json and theory.md for the reproduction report")
    rep.add_argument("--out", default="reports/theory", metavar="DIR", help="output directory")
    add_plan_size(rep, quick="fewer Monte-Carlo draws and a short training run",
                  full="more Monte-Carlo draws and a longer training run")
    rep.add_argument("--run-dir", metavar="DIR", help="measure the Bode plot on this trained run instead of training one")
    rep.add_argument("--sweep", metavar="FILE", help="JSON file of (d_k, gamma_critical) results for the empirical exponent")
    rep.add_argument("--seed", type=seed_int, default=0, help="seed of the Monte-Carlo draws and of the training run")
    rep.set_defaults(func=cmd_report)

    pd = add_command(sub, "phase-diagram", "gamma_c over (d_k, T) against the reduced-model simulation")
    pd.add_argument("--out", default="reports/theory-phase-diagram", metavar="DIR",
                    help="output directory (not a theory report's: its phase_diagram.png would be replaced)")
    pd.add_argument("--samples", type=int, default=256, help="Monte-Carlo draws per context length")
    pd.add_argument("--seed", type=seed_int, default=0, help="seed of the draws")
    pd.set_defaults(func=cmd_phase_diagram)

    bode = add_command(sub, "bode", "closed-form and measured Bode plots")
    bode.add_argument("--out", default="reports/theory-bode", metavar="DIR",
                      help="output directory (not a theory report's: its Bode plots would be replaced)")
    bode.add_argument("--gamma", type=float, default=0.8, help="shear coupling of the closed form")
    bode.add_argument("--run-dir", metavar="DIR", help="a trained run to measure (default: a random-initialised model)")
    bode.add_argument("--seed", type=seed_int, default=0, help="seed of the random model and of its input tokens")
    bode.set_defaults(func=cmd_bode)

    gc = add_command(sub, "gamma-c", "evaluate the closed-form critical coupling")
    gc.add_argument("--d-k", type=float, nargs="+", required=True, metavar="D", help="head dimensions")
    context = gc.add_mutually_exclusive_group()  # both: the last one given was used, without a word
    context.add_argument("--context", type=float, nargs="+", metavar="T", help="context lengths T (required)")
    add_deprecated(context, "--T", "--context", "context", type=float, nargs="+")
    gc.add_argument("--c", type=float, default=0.74, help="the law's constant")
    gc.set_defaults(func=cmd_gamma_c, needs_torch=False)

    fit = add_command(sub, "fit-exponent", "fit gamma_critical ∝ d_k^alpha to saved sweep results")
    fit.add_argument("file", help="JSON: a list of [d_k, gamma_critical] pairs or of records")
    add_json(fit, "the fit")
    fit.set_defaults(func=cmd_fit_exponent, needs_torch=False)
