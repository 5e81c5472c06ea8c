"""Export a trained run and compare the exported graphs with PyTorch on the run's own task:
logit error (full forward and every decode step), held-out accuracy in fp32 and INT8, file sizes,
latency per generated token, and the measured growth of the key range against the bound
log2(1 + 2 gamma) bits."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from psattn.export.graphs import check_exportable
from psattn.export.metrics import accuracy, greedy_agreement, teacher_forced_agreement, text_quality
from psattn.export.onnx import (
    INT8_MODES,
    OnnxLM,
    data_path_for,
    decode_path_for,
    int8_path_for,
    quantize_int8,
    share_weights,
    write_onnx_files,
)
from psattn.export.quantize import calibration_inputs, fp32_nodes
from psattn.export.staging import moved, staged_files
from psattn.models.decoder import DecoderLM
from psattn.models.generate import generate
from psattn.ops.hooks import capture
from psattn.tasks.batch import TaskBatch
from psattn.timing import interleaved_medians
from psattn.training.config import RunConfig
from psattn.training.run_dir import eval_batch, load_trained, run_files


@torch.no_grad()
def key_range_growth(model: DecoderLM, inputs: torch.Tensor) -> list[dict[str, float]]:
    """Per layer: log2(max|k̂| / max|k|) measured on ``inputs`` (k rotated, k̂ as attention sees it), and
    the bound that ‖k̂‖∞ <= (|1 + gamma_k| + |gamma_k|) ‖k‖∞ gives: log2(1 + 2 gamma_k) bits for
    gamma_k >= 0. A shear before RoPE is bounded on the raw keys, and a rotation can raise a row's largest
    entry by up to √2 and lower another's as much, so its bound is one bit more."""
    with capture(model, "*.hook_k", "*.hook_k_sheared") as seen:
        model(inputs)
    rows = []
    for i, block in enumerate(model.blocks):
        k, k_hat = seen[f"blocks.{i}.attn.hook_k"], seen[f"blocks.{i}.attn.hook_k_sheared"]
        rotation_bits = 0.0 if block.attn.post_rope else 1.0  # log2(√2 · √2)
        rows.append({"layer": i, "gamma_k": block.attn.gamma_k,
                     "measured_bits": math.log2(float(k_hat.abs().max() / k.abs().max())),
                     "bound_bits": math.log2(abs(1 + block.attn.gamma_k) + abs(block.attn.gamma_k)) + rotation_bits,
                     "pre_rope": not block.attn.post_rope})
    return rows


def _latency_per_token(model: DecoderLM, onnx_models: dict[str, OnnxLM], prompt: torch.Tensor, tokens: int,
                       repeats: int = 3) -> dict[str, float]:
    """Seconds per greedy token for PyTorch and each ONNX model, measured interleaved in one run."""
    runs: dict[str, Callable[[], object]] = {"pytorch": lambda: generate(model, prompt, tokens)}
    runs.update({name: partial(m.generate, prompt.numpy(), tokens) for name, m in onnx_models.items()})
    return {name: t / tokens for name, t in interleaved_medians(runs, repeats).items()}


GREEDY_PROMPTS = 16  # held-out prompts whose greedy continuations INT8 and fp32 are compared on


def onnx_family(path: Path) -> list[Path]:
    """Every file an ONNX export to ``path`` may write: the prefill graph, the decode step and the weights
    both read, and the same three of each INT8 copy."""
    prefill = [path, *(int8_path_for(path, mode) for mode in INT8_MODES)]
    return [p for graph in prefill for p in (graph, decode_path_for(graph), data_path_for(graph))]


def export_bytes(*files: str | Path) -> int:
    """Bytes on disk of an export's files (two graphs and the weights they share)."""
    return sum(Path(f).stat().st_size for f in files)


def export_and_compare(run_dir: str | Path, onnx_path: str | Path, *, int8: bool | str = False, rows: int = 256,
                       decode_tokens: int = 24, json_path: str | Path | None = None) -> dict[str, Any]:
    """Export the run's model to ``onnx_path`` (and ``.decode.onnx``, ``.onnx.data``) and measure it against
    PyTorch. ``int8`` = "dynamic" (or True) or "static" also writes INT8 copies of both graphs
    (static ones calibrated on training rows) and measures them. Uses one thread on both sides.
    The files are written in a staging folder and moved beside ``onnx_path`` when all are complete,
    replacing an earlier export's (``psattn.export.staging``); when anything fails, nothing changes there.
    ``json_path``: the result is written there as JSON, moved in with the export (a stop leaves both new or
    neither). A run that does not load is refused before anything is written."""
    mode = "dynamic" if int8 is True else (int8 or None)
    if mode is not None and mode not in INT8_MODES:
        raise ValueError(f"int8 must be one of {INT8_MODES}, got {int8!r}")
    model = load_trained(run_dir)  # checks that run_dir is a run directory whose files bind its checkpoint
    check_exportable(model)  # before the comparison's eager logits
    target = Path(onnx_path)
    summary: dict[str | Path, str] = {}
    with staged_files(target, onnx_family, keep=run_files(run_dir), texts=summary) as staged:
        result = _export_and_compare(model, run_dir, staged, mode, rows, decode_tokens)
        result["files"] = moved(result["files"], target)
        if json_path is not None:
            summary[json_path] = json.dumps(result, indent=2) + "\n"
    return result


@torch.no_grad()
def _export_and_compare(model: DecoderLM, run_dir, onnx_path, mode: str | None, rows: int,
                        decode_tokens: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    config = RunConfig.from_file(Path(run_dir) / "config.json")
    batch = eval_batch(config)
    batch = TaskBatch(batch.inputs[:rows], batch.targets[:rows])
    torch_logits = model(batch.inputs).numpy()
    _check_finite("PyTorch", torch_logits, run_dir)  # before the export: a model gone NaN has nothing to compare
    paths = write_onnx_files(model, onnx_path)  # into the staging folder of export_and_compare
    onnx_model = OnnxLM(paths.prefill, paths.decode)
    onnx_logits = onnx_model.logits(batch.inputs.numpy())
    _check_finite("onnxruntime", onnx_logits, run_dir)
    prompt = batch.inputs[:4, : batch.inputs.shape[1] // 2]
    ours = generate(model, prompt, decode_tokens)
    seqs, step_logits = onnx_model.generate(prompt.numpy(), decode_tokens)
    result: dict[str, Any] = {
        "variant": model.config.layer_attention_configs()[0].variant,
        "gamma": model.config.layer_attention_configs()[0].gamma,
        "files": {"prefill": str(paths.prefill), "decode": str(paths.decode), "data": str(paths.data)},
        "size_bytes": {"fp32": export_bytes(paths.prefill, paths.decode, paths.data)},
        "max_logit_error": {"full_forward": float(np.abs(torch_logits - onnx_logits).max()),
                            "decode_steps": float(np.abs(ours.logits.numpy() - step_logits).max())},
        "greedy_tokens_equal": bool((ours.sequences.numpy() == seqs).all()),
        "accuracy": {"pytorch": accuracy(torch_logits, batch), "onnx_fp32": accuracy(onnx_logits, batch)},
        "key_range_growth": key_range_growth(model, batch.inputs),
    }
    token_bytes = config.task.tokens().token_bytes if hasattr(config.task, "tokens") else None
    if token_bytes is not None:  # a text run: language-model quality in every runtime
        result["text"] = {"pytorch": text_quality(torch_logits, batch, token_bytes),
                          "onnx_fp32": text_quality(onnx_logits, batch, token_bytes)}
    timed = {"onnxruntime": onnx_model}
    if mode is not None:
        measured = int8_against_fp32(model, onnx_model, onnx_logits, config, batch, mode,
                                     int8_path_for(onnx_path, mode), decode_tokens)
        result["int8_mode"] = mode
        result["files"].update(measured.pop("files"))
        result["size_bytes"]["int8"] = measured.pop("size_bytes")
        result["accuracy"]["onnx_int8"] = measured.pop("accuracy")
        if "text" in measured:
            result["text"]["onnx_int8"] = measured.pop("text")
        result.update(measured)
        timed["onnxruntime_int8"] = OnnxLM(result["files"]["prefill_int8"], result["files"]["decode_int8"])
    latency = _latency_per_token(model, timed, batch.inputs[:1, :16], decode_tokens)
    result["latency_ms_per_token"] = {k: v * 1e3 for k, v in latency.items()}
    return result


def _check_finite(runtime: str, logits: np.ndarray, run_dir) -> None:
    if not np.isfinite(logits).all():
        raise ValueError(f"{runtime} gives NaN or infinite logits for {run_dir}'s model; "
                         "there is nothing meaningful to compare")


def int8_against_fp32(model: DecoderLM, fp32: OnnxLM, fp32_logits: np.ndarray, config: RunConfig, batch: TaskBatch,
                      mode: str, path: Path, decode_tokens: int = 24) -> dict[str, Any]:
    """Quantize the exported graphs of ``model`` (``fp32``) to INT8 (``mode`` "dynamic" or "static",
    calibrated on training rows, the LM head kept in fp32; in both ``quantize.fp32_nodes`` kept in fp32), write
    them to ``path`` (and its ``.decode.onnx``, their quantized weights once in its ``.onnx.data``) and measure
    them against fp32 on ``batch``: held-out accuracy (and text quality for a text run), teacher-forced top-1
    agreement and KL, greedy agreement over ``GREEDY_PROMPTS`` held-out prompts, and the bytes on disk."""
    prefill_feeds = decode_feeds = None
    if mode == "static":
        calibration = calibration_inputs(config)
        prefill_feeds = [{"input_ids": rows_} for rows_ in calibration]
        decode_feeds = [f for rows_ in calibration for f in fp32.decode_feeds(rows_[:, : rows_.shape[1] // 2], 4)]
    prefill = quantize_int8(fp32.prefill_path, path, prefill_feeds, exclude=fp32_nodes(fp32.prefill_path, model))
    decode = quantize_int8(fp32.decode_path, decode_path_for(prefill), decode_feeds,
                           exclude=fp32_nodes(fp32.decode_path, model))
    data = share_weights(prefill, decode)  # both graphs quantize each weight alike: one copy of it
    quantized = OnnxLM(prefill, decode)
    prompts = batch.inputs[:GREEDY_PROMPTS, : batch.inputs.shape[1] // 2].numpy()
    fp32_seqs, _ = fp32.generate(prompts, decode_tokens)
    q_seqs, _ = quantized.generate(prompts, decode_tokens)
    logits = quantized.logits(batch.inputs.numpy())
    new = slice(prompts.shape[1], None)  # the generated tokens, not the prompt both share
    greedy = greedy_agreement(fp32_seqs[:, new], q_seqs[:, new])
    result: dict[str, Any] = {
        "files": {"prefill_int8": str(prefill), "decode_int8": str(decode), "data_int8": str(data)},
        "size_bytes": export_bytes(prefill, decode, data),
        "accuracy": accuracy(logits, batch), "int8_teacher_forced": teacher_forced_agreement(fp32_logits, logits),
        "int8_greedy": greedy, "int8_greedy_tokens_agree": greedy["tokens_agree"]}
    if hasattr(config.task, "tokens"):
        result["text"] = text_quality(logits, batch, config.task.tokens().token_bytes)
    return result


def format_comparison(r: dict[str, Any]) -> str:
    """``export_and_compare``'s result as the lines ``psattn export`` prints."""
    lines = [
        f"{r['variant']} (gamma {r['gamma']:g}): prefill graph {r['files']['prefill']}, decode step {r['files']['decode']}",
        *([f"  INT8 ({r['int8_mode']}): prefill graph {r['files']['prefill_int8']}, decode step {r['files']['decode_int8']}"]
          if "prefill_int8" in r["files"] else []),
        f"  size on disk (both graphs and their weights): fp32 {r['size_bytes']['fp32'] / 1e6:.2f} MB" +
        (f", int8 {r['size_bytes']['int8'] / 1e6:.2f} MB" if "int8" in r["size_bytes"] else ""),
        f"  max |logit error| vs PyTorch: full forward {r['max_logit_error']['full_forward']:.2e}, "
        f"decode steps {r['max_logit_error']['decode_steps']:.2e}; greedy tokens equal: {r['greedy_tokens_equal']}",
        "  held-out accuracy: " + ", ".join(f"{k} {v:.3f}" for k, v in r["accuracy"].items())
        + (f" (INT8 {r['int8_mode']})" if "int8_mode" in r else ""),
        f"  latency per token (batch 1, 1 thread): PyTorch {r['latency_ms_per_token']['pytorch']:.2f} ms, "
        f"ONNX Runtime {r['latency_ms_per_token']['onnxruntime']:.2f} ms "
        f"(ratio {r['latency_ms_per_token']['onnxruntime'] / r['latency_ms_per_token']['pytorch']:.2f})"
        + (f", ONNX Runtime INT8 {r['latency_ms_per_token']['onnxruntime_int8']:.2f} ms"
           if "onnxruntime_int8" in r["latency_ms_per_token"] else ""),
    ]
    if "int8_teacher_forced" in r:
        tf, g = r["int8_teacher_forced"], r["int8_greedy"]
        lines.append(f"  INT8 against fp32, teacher-forced over {tf['positions']:,} held-out positions: top-1 agreement "
                     f"{tf['top1_agreement']:.4f}, KL {tf['kl_nats']:.2e} nats; greedy over {g['prompts']} prompts: "
                     f"{g['tokens_agree']:.3f} of tokens equal, {g['prefix_agree']:.3f} before the first difference")
    if "text" in r:
        lines.append("  held-out bits per byte: " + ", ".join(f"{k} {v['bits_per_byte']:.3f}" for k, v in r["text"].items())
                     + "; ICL score: " + ", ".join(f"{k} {v['icl_score']:+.3f}" for k, v in r["text"].items()))
    for g in r["key_range_growth"]:
        bound = "log2(1 + 2 gamma)" if g["gamma_k"] >= 0 else "log2(|1 + gamma| + |gamma|)"  # the same for gamma >= 0
        if g.get("pre_rope"):
            bound += " + 1, the shear before RoPE"
        lines.append(f"  layer {g['layer'] + 1}: key range grows by {g['measured_bits']:.2f} bits "
                     f"(bound {bound} = {g['bound_bits']:.2f})")
    return "\n".join(lines)
