"""The real-text section of the reproduction report: table, figures and samples from saved runs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from psattn.experiments import text_plots
from psattn.experiments.markdown import table
from psattn.experiments.studies.text import (
    HYPOTHESIS_MODELS,
    TEXT_PLANS,
    TextPlan,
    mean_sd,
    model_key,
    model_label,
    summarise_text,
    text_experiment,
)
from psattn.experiments.sweep import run_sweep
from psattn.models import ModelConfig
from psattn.models.generate import continue_text
from psattn.models.lm_eval import icl_window
from psattn.models.presets import preset_parameter_count
from psattn.textdata.corpus import describe_corpus
from psattn.timing import interleaved_medians
from psattn.training.run_dir import load_trained, run_tokenizer

SAMPLE_PROMPT_CHARS = 120
#: the pair the edge table compares: one PSA layer against the two plain layers induction needs
EDGE_MODELS = ((1, "key_only", 1.0), (2, "baseline", 0.0))


def samples(runs: Path, configs, seed: int = 0, max_new_tokens: int = 160) -> dict[str, dict[str, str]]:
    """A continuation of the same held-out prompt by every model of ``configs`` trained on ``seed`` (run
    directories ``runs/<name>``), within the context each was trained on (``continue_ids``)."""
    first = configs[0]
    tokenizer = run_tokenizer(runs / first.name)
    held = tokenizer.decode(np.asarray(first.task.tokens().eval[: 1 << 14]).tolist())
    starts = [i + 2 for i in range(len(held)) if held.startswith("\n\n", i) and held[i + 2 : i + 3].isalpha()]
    definitions = [i for i in starts if held.startswith(("def ", "class "), i)]  # in source code, a definition
    start = definitions[0] if definitions else starts[1]
    prompt = held[start : held.rfind(" ", start, start + SAMPLE_PROMPT_CHARS)]  # a paragraph's opening words
    result = {}
    for config in configs:
        if config.train.seed != seed:
            continue
        model = load_trained(runs / config.name)
        text = continue_text(model, run_tokenizer(runs / config.name), prompt, max_new_tokens, seed=0,
                             context=config.task.seq_len)
        result[model_label(*model_key({"config": config.to_dict()}))] = {"prompt": prompt, "continuation": text}
    return result


PRECISIONS = ("fp32", "INT8 dynamic", "INT8 static")  # ONNX Runtime
EXECUTORCH_PRECISIONS = ("ExecuTorch fp32", "ExecuTorch int8")  # with ``executorch=True``
QUANTIZED = ("INT8 dynamic", "INT8 static", "ExecuTorch int8")  # the rows the verdict judges


def edge_comparison(runs: Path, configs, onnx: Path, seed: int = 0, models=EDGE_MODELS,
                    decode_tokens: int = 32, executorch: bool = False) -> dict[str, dict] | None:
    """Export the ``models`` (layers, variant, gamma) of ``configs`` trained on ``seed`` (run directories
    ``runs/<name>``) to ONNX under ``onnx``, quantize each to INT8 dynamically and statically (the value
    projections in fp32, and under static INT8 the LM head), measure both against fp32, then time every
    graph's greedy decoding interleaved in one loop; None when the export extra is not installed. Each
    row holds one entry per precision (``PRECISIONS``). ``executorch``: also write each model as fp32 and
    int8 ExecuTorch programs (``executorch_and_compare``; int8 measured against PyTorch's fp32 logits)
    and time them in the same loop (``EXECUTORCH_PRECISIONS``)."""
    try:
        import onnxruntime  # noqa: F401

        from psattn.export.compare import export_and_compare, int8_against_fp32
        from psattn.export.onnx import OnnxLM
        from psattn.tasks.batch import TaskBatch
        from psattn.training.run_dir import eval_batch
    except ImportError:
        return None
    threads = torch.get_num_threads()
    rows, graphs = {}, {}
    try:
        for config in configs:
            key = model_key({"config": config.to_dict()})
            if config.train.seed != seed or key not in models:
                continue
            label = model_label(*key)
            path = onnx / config.name / "model.onnx"
            r = export_and_compare(runs / config.name, path, int8="dynamic", decode_tokens=decode_tokens)
            fp32 = OnnxLM(r["files"]["prefill"], r["files"]["decode"])
            batch = eval_batch(config)
            batch = TaskBatch(batch.inputs[:256], batch.targets[:256])  # the rows export_and_compare scores
            static = int8_against_fp32(load_trained(runs / config.name), fp32, fp32.logits(batch.inputs.numpy()),
                                       config, batch, "static",
                                       path.with_suffix(".int8-static.onnx"), decode_tokens)
            rows[label] = {"parameters": preset_parameter_count(config.model),
                           "fp32": {"size_bytes": r["size_bytes"]["fp32"], "text": r["text"]["onnx_fp32"]},
                           "INT8 dynamic": {"size_bytes": r["size_bytes"]["int8"], "text": r["text"]["onnx_int8"],
                                            "teacher_forced": r["int8_teacher_forced"], "greedy": r["int8_greedy"]},
                           "INT8 static": {"size_bytes": static["size_bytes"], "text": static["text"],
                                           "teacher_forced": static["int8_teacher_forced"],
                                           "greedy": static["int8_greedy"]},
                           "greedy_tokens_equal": r["greedy_tokens_equal"]}
            graphs[f"{label} / fp32"] = fp32
            graphs[f"{label} / INT8 dynamic"] = OnnxLM(r["files"]["prefill_int8"], r["files"]["decode_int8"])
            graphs[f"{label} / INT8 static"] = OnnxLM(static["files"]["prefill_int8"], static["files"]["decode_int8"])
            if executorch:
                rows[label].update(_executorch_rows(runs / config.name, onnx / config.name / "model.pte", graphs,
                                                    label, decode_tokens))
        prompt = np.asarray(configs[0].task.tokens().eval[:16], dtype=np.int64)[None]
        latency = interleaved_medians({k: partial(g.generate, prompt, decode_tokens) for k, g in graphs.items()}, repeats=7)
    finally:
        torch.set_num_threads(threads)
    for label, row in rows.items():
        for precision in _precisions(row):
            row[precision]["ms_per_token"] = latency[f"{label} / {precision}"] / decode_tokens * 1e3
    return rows


def _executorch_rows(run_dir: Path, path: Path, graphs: dict[str, Any], label: str,
                     decode_tokens: int) -> dict[str, dict]:
    """The fp32 and int8 ExecuTorch programs of one run, measured on the rows the ONNX graphs are
    (256 held-out windows, 16 greedy prompts); their programs join ``graphs`` for the timing loop."""
    from psattn.export.compare_executorch import executorch_and_compare
    from psattn.export.executorch import ExecuTorchLM

    et = executorch_and_compare(run_dir, path, quantize=("int8",), rows=256, decode_tokens=decode_tokens)
    graphs[f"{label} / ExecuTorch fp32"] = ExecuTorchLM(et["files"]["fp32"])
    graphs[f"{label} / ExecuTorch int8"] = ExecuTorchLM(et["files"]["int8"])
    int8 = et["quantized"]["int8"]
    return {"ExecuTorch fp32": {"size_bytes": et["size_bytes"]["fp32"], "text": et["text"]["executorch_fp32"],
                                "max_logit_error": et["max_logit_error"]},
            "ExecuTorch int8": {"size_bytes": et["size_bytes"]["int8"], "text": et["text"]["executorch_int8"],
                                "teacher_forced": int8["teacher_forced"], "greedy": int8["greedy"]}}


def _precisions(row: dict[str, Any]) -> list[str]:
    """The precisions a row of ``edge_comparison`` holds, in table order."""
    return [p for p in PRECISIONS + EXECUTORCH_PRECISIONS if p in row]


def edge_verdict(edge: dict[str, dict]) -> str:
    """Whether INT8 keeps the one-layer PSA model (the first row) at least as close to fp32 as the
    two-layer baseline (the second) on both teacher-forced measures, and within 0.005 bits per byte,
    for every quantized precision both rows hold."""
    (psa_label, psa), (base_label, base) = list(edge.items())[:2]
    clauses = []
    for precision in (q for q in QUANTIZED if q in psa and q in base):
        p, b = psa[precision], base[precision]
        pt, bt = p["teacher_forced"], b["teacher_forced"]
        close = pt["top1_agreement"] >= bt["top1_agreement"] and pt["kl_nats"] <= bt["kl_nats"]
        # fp32 here equals PyTorch's; judged as printed, to 4 decimals (unrounded, +0.00504 read "+0.0050 ... outside 0.005")
        shift = round(p["text"]["bits_per_byte"] - psa["fp32"]["text"]["bits_per_byte"], 4) + 0.0
        clauses.append(f"{precision}: {psa_label} {'at least as faithful to fp32 as' if close else 'less faithful to fp32 than'} "
                       f"{base_label} (top-1 {pt['top1_agreement']:.4f} against {bt['top1_agreement']:.4f}, "
                       f"KL {pt['kl_nats']:.2e} against {bt['kl_nats']:.2e}), its bits per byte "
                       f"{shift:+.4f} from fp32 ({'within' if abs(shift) <= 0.005 else 'outside'} 0.005)")
    return "; ".join(clauses) + "."


def edge_table(edge: dict[str, dict]) -> list[str]:
    """The markdown table of ``edge_comparison``'s rows: one line per model and precision."""
    lines = []
    for label, r in edge.items():
        for precision in _precisions(r):
            m = r[precision]
            tf, greedy = m.get("teacher_forced"), m.get("greedy")
            lines.append([label if precision == "fp32" else "", f"{r['parameters']:,}" if precision == "fp32" else "",
                          precision, f"{m['size_bytes'] / 1e6:.2f} MB", f"{m['ms_per_token']:.3f}",
                          f"{m['text']['bits_per_byte']:.3f}", f"{m['text']['icl_score']:+.3f}",
                          "—" if tf is None else f"{tf['top1_agreement']:.4f}",
                          "—" if tf is None else f"{tf['kl_nats']:.1e}",
                          "—" if greedy is None else f"{greedy['tokens_agree']:.2f}"])
    return table(["model", "parameters", "precision", "file", "ms per token", "bits/byte", "ICL score",
                  "top-1 = fp32 (teacher-forced)", "KL(fp32 ‖ INT8), nats", "greedy tokens = fp32 (16 prompts)"],
                 lines)


def copy_gain(row: dict, probe: str = "passage") -> float:
    """Nats by which the second copy of a repeated ``probe`` ("passage" or "random") is easier than the first."""
    return row[f"{probe}_first_loss"][0] - row[f"{probe}_second_loss"][0]


def verdict(rows: list[dict], tokens: int | None = None) -> str:
    """The hypothesis, clause by clause, read off the repeated-passage copy gain and the ICL score, at the
    budget of ``tokens`` training tokens (named first: the verdict speaks for that budget only)."""
    by = {(r["layers"], r["variant"], r["gamma"]): r for r in rows}
    ranking = ", ".join(f"{model_label(*key)} {copy_gain(r):.2f}" for key, r in
                        sorted(by.items(), key=lambda kv: -copy_gain(kv[1])))
    out = [] if tokens is None else [
        f"This verdict speaks for {tokens / 1e6:.1f}M training tokens, before two plain layers have formed an "
        "induction head (at context 256 none had by 24M tokens at any batch size in `psattn sweep text_pilot`); "
        "at context 64 two plain layers form one after 7.8M tokens, and `psattn sweep text_phase` compares the "
        "models past that point (docs/text.md)."]
    out.append(f"Copy gain on a repeated held-out passage (nats, first copy minus second), largest first: {ranking}.")
    one_plain, one_psa, two_plain = (by.get(key) for key in HYPOTHESIS_MODELS)
    if one_plain and one_psa:
        holds = copy_gain(one_psa) > copy_gain(one_plain) and one_psa["icl_score"][0] < one_plain["icl_score"][0]
        out.append(
            f"One key-sheared layer against one plain layer: copy gain {copy_gain(one_psa):.2f} against "
            f"{copy_gain(one_plain):.2f}, ICL score {one_psa['icl_score'][0]:+.3f} against {one_plain['icl_score'][0]:+.3f}: "
            + ("**one PSA layer copies, and learns in context, more than one plain layer**."
               if holds else "**the hypothesis's first clause does not hold at this budget**."))
    if two_plain and one_psa:
        more = copy_gain(two_plain) > copy_gain(one_psa)
        out.append(
            f"Two plain layers: copy gain {copy_gain(two_plain):.2f}, ICL score {two_plain['icl_score'][0]:+.3f}; "
            + ("they copy more than the single PSA layer." if more else
               "at this budget they copy less than the single PSA layer, though with a second layer's parameters."))
    if any(r["random_first_loss"][0] > math.log(r["vocab_size"]) for r in rows):
        out.append("Random tokens (uniform over the vocabulary) are unlike anything these models saw; at this budget "
                   "their loss is above the uniform guess's ln V, so their copy gain is shown but not used above.")
    return " ".join(out)


@dataclass
class TextResults:
    """Everything the real-text section reports: the summary rows, the seed-0 histories (by model label),
    samples, the edge comparison and parameter counts."""

    plan: TextPlan
    rows: list[dict[str, Any]]
    histories: dict[str, list[dict[str, Any]]]  # model label -> seed-0 metrics rows
    samples: dict[str, dict[str, str]]
    edge: dict[str, dict] | None
    params: dict[str, int]  # model label -> parameters


def text_results(out: Path, mode: str, workers: int | None, progress: bool, executorch: bool = False) -> TextResults:
    """Train what is missing, then summarise, sample and export (``executorch``: to ExecuTorch as well)."""
    configs = text_experiment(mode)
    plan = TEXT_PLANS[mode]
    results = run_sweep(configs, out / "runs", workers=workers, progress=progress)
    first_seed = [c for c in configs if c.train.seed == plan.seeds[0]]
    labels = {c.name: model_label(*model_key(results[c.name])) for c in first_seed}
    return TextResults(
        plan=plan, rows=summarise_text(results),
        histories={labels[c.name]: results[c.name]["history"] for c in first_seed},
        samples=samples(out / "runs", configs, plan.seeds[0]),
        edge=edge_comparison(out / "runs", configs, out / "onnx", plan.seeds[0], executorch=executorch),
        params={labels[c.name]: preset_parameter_count(ModelConfig.from_dict(c.model.to_dict())) for c in first_seed},
    )


def text_figures(res: TextResults, figures: Path) -> None:
    """Draw the real-text part's figures into ``figures``."""
    final = {label: history[-1] for label, history in res.histories.items()}
    text_plots.plot_text_curves(res.histories, figures / "text_curves.png")
    text_plots.plot_position_loss({label: row["position_loss"] for label, row in final.items()},
                                  figures / "text_position_loss.png")
    text_plots.plot_head_heatmaps({label: {k: row[k] for k in ("induction_score", "prefix_matching_score")}
                                   for label, row in final.items()}, figures / "text_head_scores.png")


def text_section(out: Path, mode: str, workers: int | None, progress: bool,
                 executorch: bool = False) -> tuple[list[str], dict[str, Any]]:
    """The section's markdown lines and its results.json entry."""
    res = text_results(out, mode, workers, progress, executorch)
    text_figures(res, out / "figures")
    return text_markdown(res), {"rows": res.rows, "samples": res.samples, "parameters": res.params, "edge": res.edge}


EXECUTORCH_NOTE = (" ExecuTorch rows: the same models as `.pte` programs (`psattn export --format executorch`: "
                   "XNNPACK; int8: int8 weights, a scale per output channel, with int8 dynamic activations, torchao; "
                   "the embedding table in fp32) in ExecuTorch's Python runtime, timed in the same loop; their int8 "
                   "program measured against PyTorch's fp32 logits, which ONNX Runtime's fp32 graph equals to 1e-5.")


def text_markdown(res: TextResults) -> list[str]:
    """The real-text part of the reproduction report, as markdown lines."""
    plan, rows, examples, edge, params = res.plan, res.rows, res.samples, res.edge, res.params
    early, late = icl_window(plan.seq_len)  # the positions the score averages (T // 16 was not one at T = 100)
    lines = [
        "## Real text",
        "",
        f"Hypothesis, stated before measuring: one key-sheared layer shows a clear in-context-learning (ICL) score and "
        f"copies a repeated passage; one plain layer does not; two plain layers do. "
        f"Corpus: {describe_corpus(plan.corpus)}, the last 5% of each document held out; "
        f"{plan.tokenizer} tokenizer (vocabulary {plan.vocab_size}), context {plan.seq_len}; d_model {plan.d_model}, "
        f"{plan.n_heads} heads, MLP; AdamW lr {plan.lr:g}, batch {plan.batch_size}, {plan.steps} steps "
        f"({plan.steps * plan.batch_size * plan.seq_len / 1e6:.1f}M training tokens), seeds {', '.join(map(str, plan.seeds))}. "
        f"ICL score: mean held-out loss at positions {late[0]}–{late[-1]} minus positions {early[0]}–{early[-1]} "
        f"(negative: later tokens are predicted better). Repeated passage: a held-out passage of {plan.seq_len // 2} tokens "
        f"shown twice; repeated random tokens: {plan.seq_len // 2} tokens drawn from the corpus's vocabulary, then the "
        "same again. Loss on the second copy below the first means the model copies in context.",
        "",
    ]
    lines += table(
        ["model", "parameters", "held-out bits/byte", "ICL score", "random tokens loss: 1st / 2nd copy",
         "passage loss: 1st / 2nd copy", "best induction score", "best prefix-matching score"],
        [[model_label(r["layers"], r["variant"], r["gamma"]),
          f"{params[model_label(r['layers'], r['variant'], r['gamma'])]:,}",
          mean_sd(r["bits_per_byte"]), mean_sd(r["icl_score"]),
          f"{r['random_first_loss'][0]:.2f} / {r['random_second_loss'][0]:.2f}",
          f"{r['passage_first_loss'][0]:.2f} / {r['passage_second_loss'][0]:.2f}",
          mean_sd(r["best_induction_score"]), mean_sd(r["best_prefix_matching_score"])] for r in rows],
    )
    lines += ["", verdict(rows, plan.steps * plan.batch_size * plan.seq_len), "",
              "![held-out loss, ICL score and passage copy gain against step](figures/text_curves.png)", "",
              "![loss against position](figures/text_position_loss.png)", "",
              "![induction and prefix-matching score of every head](figures/text_head_scores.png)", "",
              "Samples (temperature 0.8, seed 0) continuing the same held-out prompt:", ""]
    edge_lines = ["### On a device: one PSA layer against two plain layers", ""]
    if edge is None:
        edge_lines += ["(Not measured: install the export extra, `pip install 'phase-space-attention[export]'`, "
                       "for the ONNX comparison.)", ""]
    else:
        edge_lines += ["Both seed-0 models exported with `psattn export` (standard ONNX operators; a prefill graph and a "
                       "decode-step graph carrying the cache) and quantized to INT8, dynamically (weights and the "
                       "embedding table; activation ranges at run time) and statically (every MatMul but the LM "
                       "head, activation ranges calibrated on training windows), the value projections and the "
                       "key-sheared layer's key projection kept in fp32 in both; greedy decoding of 32 tokens "
                       "after a 16-token prompt in ONNX Runtime, one thread, every graph timed interleaved in one loop "
                       "(median of 7); bits per byte and ICL score of each runtime's logits on the held-out windows; "
                       "INT8 against fp32 teacher-forced on every position of those windows (top-1 agreement, mean KL "
                       "divergence) and in greedy continuations of 16 held-out prompts."
                       + (EXECUTORCH_NOTE if any("ExecuTorch fp32" in row for row in edge.values()) else
                          " ExecuTorch rows: `psattn reproduce --executorch` (the executorch extra; a few minutes "
                          "more)."), ""]
        edge_lines += edge_table(edge)
        edge_lines += ["", edge_verdict(edge), ""]
    prompt = next(iter(examples.values()))["prompt"]
    lines += ["Prompt: `" + prompt.replace("\n", " ").replace("`", "'") + "`", ""]
    for label, sample in examples.items():
        lines += [f"- **{label}**: `" + sample["continuation"].replace("\n", " ").replace("`", "'") + "`"]
    lines.append("")
    return lines + edge_lines
