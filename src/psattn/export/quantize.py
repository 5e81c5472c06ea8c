"""The INT8 policy of the ONNX export: which MatMuls of a graph multiply which model parameters
(``matmul_weights``), their groups (the projections, the LM head, and the two weightless activation
products of every attention layer; ``matmul_groups``), the nodes INT8 keeps in fp32 (``fp32_nodes``),
and the training rows static quantization calibrates on (``calibration_inputs``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from psattn.models.decoder import DecoderLM
from psattn.tasks.registry import sample_task
from psattn.training.config import RunConfig
from psattn.training.seeds import CALIBRATION, stream_generator

#: parameter name part -> group of its MatMul
WEIGHT_GROUPS = {"q_proj": "q projection", "k_proj": "k projection", "v_proj": "v projection",
                 "o_proj": "output projection", "mlp.up": "MLP up", "mlp.down": "MLP down", "lm_head": "LM head",
                 "embed": "LM head"}
SCORES, MIXING = "scores q̂·k̂ (activations)", "attention × values (activations)"
EMBEDDING = "embedding (Gather)"


def matmul_weights(path: str | Path, model: torch.nn.Module) -> dict[str, str]:
    """Each MatMul node of the ONNX graph at ``path`` -> the name of the model parameter it multiplies
    by ("" for the activation products, which have no weight)."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    params = [(name, p.detach().numpy()) for name, p in model.state_dict().items() if p.dim() == 2]
    names = {}
    for node in (n for n in graph.node if n.op_type == "MatMul"):
        source = node.input[1]
        if source not in weights and source in producer and producer[source].op_type == "Transpose":
            source = producer[source].input[0]  # a tied head: the embedding, transposed
        w = weights.get(source)
        names[node.name] = "" if w is None else next(
            (n for n, p in params if (p.shape == w.shape and np.array_equal(p, w))
             or (p.T.shape == w.shape and np.array_equal(p.T, w))), "?")
    return names


def matmul_groups(path: str | Path, model: torch.nn.Module) -> dict[str, list[str]]:
    """The MatMul node names of the ONNX graph at ``path``, by group (see the module docstring)."""
    import onnx

    graph = onnx.load(str(path)).graph
    weights = {i.name for i in graph.initializer}
    initializers = {i.name: i for i in graph.initializer}
    groups: dict[str, list[str]] = {}
    for node, name in matmul_weights(path, model).items():
        if name:
            group = next((g for part, g in WEIGHT_GROUPS.items() if part in name), f"other weight ({name})")
        else:  # per attention layer: the scores come first, then the mixing of the values
            previous = [g for g in groups if g in (SCORES, MIXING)]
            count = sum(len(groups[g]) for g in previous)
            group = SCORES if count % 2 == 0 else MIXING
        groups.setdefault(group, []).append(node)
    embedding = [n.name for n in graph.node if n.op_type == "Gather" and n.input[0] in weights
                 and len(initializers[n.input[0]].dims) == 2]
    if embedding:
        groups[EMBEDDING] = embedding
    return groups


def fp32_nodes(path: str | Path, model: DecoderLM) -> list[str]:
    """The MatMuls that INT8, dynamic or static, keeps in fp32: every layer's value projection, and the
    key projection of every layer that shears its keys (gamma_k != 0), whose rounding error the shear
    k + gamma_k (k - k_prev) amplifies by up to 1 + 2 gamma_k: alone in INT8 it costs text_phase's key-only
    layer more than two plain layers' key projections cost them, with 8-bit and 7-bit weights alike. The
    value projections cost the reproduction's one-layer key-only model 3% of its top-1 choices under
    dynamic INT8 with 8-bit weights, which saturated ONNX Runtime's kernels; with the 7-bit weights stored
    now under 1%, about what they cost the plain models (docs/edge.md)."""
    sheared = [i for i, a in enumerate(model.config.layer_attention_configs()) if a.gammas[1] != 0]

    def kept(name: str) -> bool:
        return "v_proj" in name or any(f"blocks.{i}.attn.k_proj" in name for i in sheared)

    return [node for node, name in matmul_weights(path, model).items() if name and kept(name)]


def calibration_inputs(config: RunConfig, rows: int = 128, chunk: int = 32) -> list[np.ndarray]:
    """Rows (B, T) of the run's task from its *training* split, in chunks: static INT8 calibration
    never sees the held-out rows it is scored on."""
    generator = stream_generator(config.train.seed, CALIBRATION)
    inputs = sample_task(config.task, rows, generator, split="train").inputs.numpy()
    return [inputs[i : i + chunk] for i in range(0, rows, chunk)]
