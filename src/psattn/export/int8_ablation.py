"""What each quantized tensor costs: INT8 one group of operators at a time, the rest in fp32.

The groups are the projections (q, k, v, output, the MLP's two layers, the LM head), found by matching
each MatMul's weight to the model's parameters, and the two activation products of every attention
layer, which have no weight: the scores (q̂ against k̂, the sheared streams) and the attention
weights times the values. Each group is quantized alone, in both graphs (prefill and decode step),
dynamically or statically (calibrated on training rows), and measured against the fp32 graphs as
``export_and_compare`` measures the whole INT8 model: teacher-forced top-1
agreement and KL over held-out windows, held-out bits per byte (text runs), and greedy agreement
over held-out prompts. "every MatMul" quantizes every MatMul, "every MatMul but the LM head" keeps the
output layer in fp32, and the last row is the INT8 model ``psattn export --int8`` writes: under
dynamic quantization ONNX Runtime also quantizes the embedding table (its Gather; a group of its own
here); under static quantization only MatMuls, the LM head kept in fp32; in both modes the export
keeps the value projections, and the key projections of key-sheared layers, in fp32 (``fp32_nodes``). Under dynamic quantization
ONNX Runtime quantizes a MatMul only when its second input is a stored weight, so the weightless
products stay fp32 and their rows equal fp32, and so does a tied LM head where the exported graph
transposes the embedding at run time instead of storing the transpose; under static quantization
they are quantized like the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from psattn.export.metrics import greedy_agreement, teacher_forced_agreement, text_quality
from psattn.export.onnx import INT8_MODES, OnnxLM, decode_path_for, export_onnx, quantize_int8
from psattn.export.quantize import EMBEDDING, calibration_inputs, fp32_nodes, matmul_groups
from psattn.tasks.batch import TaskBatch
from psattn.training.config import RunConfig
from psattn.training.run_dir import eval_batch, load_trained

WHOLE = "the INT8 model (psattn export --int8)"


@torch.no_grad()
def int8_ablation(run_dir: str | Path, out_dir: str | Path, *, mode: str = "dynamic", rows: int = 256,
                  prompts: int = 16, decode_tokens: int = 32) -> list[dict[str, Any]]:
    """One row per group (and "every MatMul"): how far the model with only that group in INT8 moves
    from fp32. Graphs are written under ``out_dir``."""
    if mode not in INT8_MODES:
        raise ValueError(f"mode must be one of {INT8_MODES}, got {mode!r}")
    torch.set_num_threads(1)
    out_dir = Path(out_dir)
    model = load_trained(run_dir)
    config = RunConfig.from_file(Path(run_dir) / "config.json")
    paths = export_onnx(model, out_dir / "model.onnx")
    batch = eval_batch(config)
    batch = TaskBatch(batch.inputs[:rows], batch.targets[:rows])
    fp32 = OnnxLM(paths.prefill, paths.decode)
    reference = fp32.logits(batch.inputs.numpy())
    starts = batch.inputs[:prompts, : batch.inputs.shape[1] // 2].numpy()
    reference_tokens = fp32.generate(starts, decode_tokens)[0][:, starts.shape[1]:]
    token_bytes = config.task.tokens().token_bytes if hasattr(config.task, "tokens") else None
    feeds: tuple[list[dict[str, np.ndarray]] | None, list[dict[str, np.ndarray]] | None] = (None, None)  # static: calibration
    if mode == "static":
        calibration = calibration_inputs(config)
        feeds = ([{"input_ids": r} for r in calibration],
                 [f for r in calibration for f in fp32.decode_feeds(r[:, : r.shape[1] // 2], 4)])
    prefill_groups, decode_groups = matmul_groups(paths.prefill, model), matmul_groups(paths.decode, model)
    def all_but(groups: dict[str, list[str]], *left: str) -> list[str]:
        return [node for group, nodes in groups.items() if group not in left for node in nodes]

    every = {"every MatMul": (all_but(prefill_groups, EMBEDDING), all_but(decode_groups, EMBEDDING)),
             "every MatMul but the LM head": (all_but(prefill_groups, EMBEDDING, "LM head"),
                                              all_but(decode_groups, EMBEDDING, "LM head")),
             WHOLE: (None, None)}
    table = []
    for i, (group, (p_nodes, d_nodes)) in enumerate(
            {**{g: (prefill_groups[g], decode_groups.get(g, [])) for g in prefill_groups}, **every}.items()):
        whole = group == WHOLE  # what ``psattn export --int8`` writes
        prefill = quantize_int8(paths.prefill, out_dir / f"group{i}.onnx", feeds[0], p_nodes,
                                exclude=fp32_nodes(paths.prefill, model) if whole else ())
        decode = quantize_int8(paths.decode, decode_path_for(prefill), feeds[1], d_nodes,
                               exclude=fp32_nodes(paths.decode, model) if whole else ())
        quantized = OnnxLM(prefill, decode)
        logits = quantized.logits(batch.inputs.numpy())
        tokens = quantized.generate(starts, decode_tokens)[0][:, starts.shape[1]:]
        row = {"group": group, "nodes": "all" if p_nodes is None else len(p_nodes), "mode": mode,
               **teacher_forced_agreement(reference, logits), "greedy": greedy_agreement(reference_tokens, tokens)}
        if token_bytes is not None:
            row["bits_per_byte"] = text_quality(logits, batch, token_bytes)["bits_per_byte"]
            row["fp32_bits_per_byte"] = text_quality(reference, batch, token_bytes)["bits_per_byte"]
        table.append(row)
    return table


def format_ablation(rows: list[dict[str, Any]]) -> list[str]:
    """The ablation as markdown lines."""
    text = "bits_per_byte" in rows[0]
    lines = ["| INT8 group | nodes | top-1 = fp32 (teacher-forced) | KL(fp32 ‖ INT8), nats | greedy tokens = fp32 |"
             + (" bits/byte (fp32 {:.4f}) |".format(rows[0]["fp32_bits_per_byte"]) if text else ""),
             "|---|---|---|---|---|" + ("---|" if text else "")]
    for r in rows:
        lines.append(f"| {r['group']} | {r['nodes']} | {r['top1_agreement']:.4f} | {r['kl_nats']:.1e} | "
                     f"{r['greedy']['tokens_agree']:.3f} |" + (f" {r['bits_per_byte']:.4f} |" if text else ""))
    return lines
