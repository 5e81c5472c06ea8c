"""Export a trained run to ExecuTorch and compare the programs with PyTorch on the run's own task:
logit error (full forward and every decode step) and greedy tokens of the fp32 program; for each
quantized program, top-1 agreement and KL divergence with PyTorch's fp32 logits over every held-out
position, greedy agreement over held-out prompts, held-out accuracy (and bits per byte on text);
file sizes and milliseconds per generated token, interleaved with PyTorch in one run."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from psattn.export.compare import GREEDY_PROMPTS
from psattn.export.executorch import (
    QUANTIZATIONS,
    ExecuTorchLM,
    check_quantizable,
    data_path_for,
    write_executorch_files,
)
from psattn.export.graphs import check_exportable
from psattn.export.metrics import accuracy, greedy_agreement, teacher_forced_agreement, text_quality
from psattn.export.staging import moved, staged_files
from psattn.models.decoder import DecoderLM
from psattn.models.generate import generate
from psattn.tasks.batch import TaskBatch
from psattn.timing import interleaved_medians
from psattn.training.config import RunConfig
from psattn.training.run_dir import eval_batch, load_trained, run_files


def quantized_path(path: str | Path, quantize: str) -> Path:
    """Where the ``quantize`` copy of the program at ``path`` goes: ``model.pte`` -> ``model.int8.pte``."""
    path = Path(path)
    return path if quantize == "fp32" else path.with_name(f"{path.stem}.{quantize}{path.suffix}")


def executorch_family(path: str | Path) -> list[Path]:
    """Every file an ExecuTorch export to ``path`` may write: each program and its weights file."""
    return [f(quantized_path(path, q)) for q in QUANTIZATIONS for f in (Path, data_path_for)]


def executorch_and_compare(run_dir: str | Path, path: str | Path, *, quantize: tuple[str, ...] = (), rows: int = 64,
                           decode_tokens: int = 24, external_weights: bool = False,
                           json_path: str | Path | None = None) -> dict[str, Any]:
    """Write the run's model as an fp32 ExecuTorch program at ``path`` (and each of ``quantize``,
    e.g. ``("int8", "int4")``, beside it; with ``external_weights``, each with its weights in a ``.ptd``
    file beside it) and measure them against PyTorch, one thread on both sides.
    The programs are written in a staging folder and moved beside ``path`` when all are complete,
    replacing an earlier export's (``psattn.export.staging``); when anything fails, nothing changes there.
    ``json_path``: the result is written there as JSON, moved in with the programs (a stop leaves both new or
    neither). A run that does not load is refused before anything is written."""
    unknown = set(quantize) - set(QUANTIZATIONS[1:])
    if unknown:
        raise ValueError(f"unknown quantization {sorted(unknown)}; expected some of {QUANTIZATIONS[1:]}")
    model = load_trained(run_dir)  # checks that run_dir is a run directory whose files bind its checkpoint
    check_exportable(model)
    for q in quantize:
        check_quantizable(model, q)  # before minutes of export and comparison
    target = Path(path)
    summary: dict[str | Path, str] = {}
    with staged_files(target, executorch_family, keep=run_files(run_dir), texts=summary) as staged:
        result = _compare(model, run_dir, staged, quantize, rows, decode_tokens, external_weights)
        result["files"] = moved(result["files"], target)
        if "data_files" in result:
            result["data_files"] = moved(result["data_files"], target)
        if json_path is not None:
            summary[json_path] = json.dumps(result, indent=2) + "\n"
    return result


@torch.no_grad()
def _compare(model: DecoderLM, run_dir, path: Path, quantize: tuple[str, ...], rows: int,
             decode_tokens: int, external_weights: bool) -> dict[str, Any]:
    torch.set_num_threads(1)
    config = RunConfig.from_file(Path(run_dir) / "config.json")
    context = config.task.seq_len
    batch = eval_batch(config)
    batch = TaskBatch(batch.inputs[:rows], batch.targets[:rows])
    token_bytes = config.task.tokens().token_bytes if hasattr(config.task, "tokens") else None
    torch_logits = model(batch.inputs).numpy()
    prompts = batch.inputs[:GREEDY_PROMPTS, : context // 2]
    new_tokens = min(decode_tokens, context - prompts.shape[1])
    ours = generate(model, prompts, new_tokens)
    torch_new = ours.sequences[:, prompts.shape[1]:].numpy()

    programs = {q: ExecuTorchLM(write_executorch_files(model, quantized_path(path, q), max_context=context, quantize=q,
                                                       external_weights=external_weights))  # into the staging folder
                for q in ("fp32", *quantize)}
    written = {q: [quantized_path(path, q)] + [data_path_for(quantized_path(path, q))] * external_weights
               for q in programs}  # each program, and its weights file
    fp32 = programs["fp32"]
    et_logits = fp32.logits(batch.inputs.numpy())
    seqs, step_logits = fp32.generate(prompts.numpy(), new_tokens)
    result: dict[str, Any] = {
        "variant": model.config.layer_attention_configs()[0].variant,
        "gamma": model.config.layer_attention_configs()[0].gamma,
        "max_context": context,
        "files": {q: str(quantized_path(path, q)) for q in programs},
        "size_bytes": {q: sum(p.stat().st_size for p in files) for q, files in written.items()},  # .pte and .ptd
        "max_logit_error": {"full_forward": float(np.abs(torch_logits - et_logits).max()),
                            "decode_steps": float(np.abs(ours.logits.numpy() - step_logits).max())},
        "greedy_tokens_equal": bool((ours.sequences.numpy() == seqs).all()),
        "accuracy": {"pytorch": accuracy(torch_logits, batch), "executorch_fp32": accuracy(et_logits, batch)},
        "quantized": {},
    }
    if external_weights:
        result["data_files"] = {q: str(files[1]) for q, files in written.items()}
        result["data_size_bytes"] = {q: files[1].stat().st_size for q, files in written.items()}
    if token_bytes is not None:
        result["text"] = {"pytorch": text_quality(torch_logits, batch, token_bytes),
                          "executorch_fp32": text_quality(et_logits, batch, token_bytes)}
    for q in quantize:
        logits = programs[q].logits(batch.inputs.numpy())
        q_seqs, _ = programs[q].generate(prompts.numpy(), new_tokens)
        result["accuracy"][f"executorch_{q}"] = accuracy(logits, batch)
        result["quantized"][q] = {"teacher_forced": teacher_forced_agreement(torch_logits, logits),
                                  "greedy": greedy_agreement(torch_new, q_seqs[:, prompts.shape[1]:])}
        if token_bytes is not None:
            result["text"][f"executorch_{q}"] = text_quality(logits, batch, token_bytes)
    steps = min(decode_tokens, context // 2)  # the timed decode, within the context the programs plan for
    prompt = batch.inputs[:1, : min(16, context - steps)]
    runs: dict[str, Callable[[], object]] = {"pytorch": lambda: generate(model, prompt, steps)}
    runs.update({f"executorch_{q}": partial(p.generate, prompt.numpy(), steps) for q, p in programs.items()})
    result["latency_ms_per_token"] = {k: v / steps * 1e3 for k, v in interleaved_medians(runs, 3).items()}
    return result


def format_executorch_comparison(r: dict[str, Any]) -> str:
    """``executorch_and_compare``'s result as the lines ``psattn export --format executorch`` prints."""
    latency = r["latency_ms_per_token"]
    data = r.get("data_size_bytes", {})  # with external weights: each program's .ptd, counted in its size
    lines = [
        f"{r['variant']} (gamma {r['gamma']:g}): ExecuTorch program {r['files']['fp32']}"
        + (f" with its weights in {r['data_files']['fp32']}" if data else "")
        + f" (methods prefill, decode; XNNPACK; up to {r['max_context']} tokens)",
        "  size" + " (.pte + .ptd)" * bool(data) + ": "
        + ", ".join(f"{q} {b / 1e6:.2f} MB" + (f" (.ptd {data[q] / 1e6:.2f} MB)" if data else "")
                    for q, b in r["size_bytes"].items()),
        f"  fp32 max |logit error| vs PyTorch: full forward {r['max_logit_error']['full_forward']:.2e}, "
        f"decode steps {r['max_logit_error']['decode_steps']:.2e}; greedy tokens equal: {r['greedy_tokens_equal']}",
        "  held-out accuracy: " + ", ".join(f"{k} {v:.3f}" for k, v in r["accuracy"].items()),
        "  latency per token (batch 1, 1 thread): " + ", ".join(f"{k} {v:.2f} ms" for k, v in latency.items())
        + f" (fp32 program / PyTorch {latency['executorch_fp32'] / latency['pytorch']:.2f})",
    ]
    for q, m in r["quantized"].items():
        tf, g = m["teacher_forced"], m["greedy"]
        lines.append(f"  {q} against PyTorch fp32, teacher-forced over {tf['positions']:,} held-out positions: top-1 "
                     f"agreement {tf['top1_agreement']:.4f}, KL {tf['kl_nats']:.2e} nats; greedy over {g['prompts']} "
                     f"prompts: {g['tokens_agree']:.3f} of tokens equal, {g['prefix_agree']:.3f} before the first difference")
    if "text" in r:
        lines.append("  held-out bits per byte: " + ", ".join(f"{k} {v['bits_per_byte']:.3f}" for k, v in r["text"].items()))
    return "\n".join(lines)
