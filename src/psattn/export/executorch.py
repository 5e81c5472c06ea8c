"""Export a DecoderLM to ExecuTorch, PyTorch's on-device runtime (Android, iOS, Arm microcontrollers).

``export_executorch`` writes one ``.pte`` program with two methods over the graphs of ``.graphs``:
``prefill`` (input_ids (B, T) -> logits and the cache state) and ``decode`` (one token and the cache
state -> logits and the state grown by one), lowered to the XNNPACK delegate, plus a constant method
``max_context``: the longest sequence the program plans memory for. The cache crosses the program
boundary as explicit state (sheared keys, values, and the last raw key and query where the shear needs
them), so PSA's cache survives the path unchanged. The program takes one sequence at a time (batch 1),
as on a device.

With ``external_weights`` the weights go to ``<name>.ptd`` beside the program instead (ExecuTorch's
external data, ``data_path_for``), which holds each of them once: a self-contained fp32 program holds a
tied embedding table twice, once for the lookup and once in XNNPACK's data for the head (ExecuTorch 1.5
copies a constant that both read). ``ExecuTorchLM`` loads the ``.ptd`` beside a program.

Quantization (torchao, before export): ``int8`` is int8 dynamic activations with int8 weights, one
scale per output channel; ``int4`` is int8 dynamic activations with int4 weights, one scale per 32
weights, each scale in bfloat16 as XNNPACK keeps it (every linear layer's input width must then be a
multiple of 32). Only the linear layers are quantized (the LM head among them); the embedding table,
norms, RoPE and the shear stay fp32.

Needs the ``executorch`` extra (executorch, which brings torchao).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from psattn.export.graphs import (
    DecodeStepGraph,
    PrefillGraph,
    check_exportable,
    check_exportable_dtype,
    check_new_tokens,
    check_token_ids,
    example_prompt,
    greedy_tokens,
)
from psattn.export.staging import staged_files
from psattn.files import write_bytes
from psattn.models.decoder import DecoderLM
from psattn.models.device import on_cpu

QUANTIZATIONS = ("fp32", "int8", "int4")
INT4_GROUP = 32  # weights sharing one int4 scale


def check_quantizable(model: DecoderLM, quantize: str) -> None:
    """ValueError unless ``model`` can be quantized as ``quantize`` says: int4 takes linear layers whose input
    width is a multiple of ``INT4_GROUP``."""
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantize!r}; expected one of {QUANTIZATIONS}")
    narrow = sorted({m.in_features for m in model.modules() if isinstance(m, torch.nn.Linear) and m.in_features % INT4_GROUP})
    if quantize == "int4" and narrow:
        raise ValueError(f"int4 weights take groups of {INT4_GROUP} input features; this model has linear layers "
                         f"{narrow} wide (use int8)")


def quantized_copy(model: DecoderLM, quantize: str) -> DecoderLM:
    """A copy of ``model`` whose linear layers are quantized as ``quantize`` says (``fp32``: unchanged): in
    PyTorch, what the program of that quantization computes (int4 scales rounded to bfloat16, as XNNPACK stores them)."""
    check_quantizable(model, quantize)
    model = copy.deepcopy(model).eval()
    if quantize == "fp32":
        return model
    with _quiet():  # torchao logs the optional kernels it cannot load here (CUDA ones, on a CPU machine)
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerAxis, PerGroup

    if quantize == "int4":
        int4 = torch.int4  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=int4, weight_granularity=PerGroup(INT4_GROUP))
    else:
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
    if model.config.tie_embeddings:  # quantizing the head must leave the embedding table as it is
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_(model, config)
    if quantize == "int4":  # XNNPACK's int4 kernels keep each group's scale in bfloat16: so does the copy
        for module in model.modules():
            scale = getattr(module.weight, "scale", None) if isinstance(module, torch.nn.Linear) else None
            if scale is not None:
                scale.copy_(scale.to(torch.bfloat16))
    return model


def data_path_for(path: str | Path) -> Path:
    """Where the weights of the program ``path`` go when they are kept outside it: ``<name>.ptd``, ``<name>``
    being the file name less a ``.pte`` suffix (only that one, as for ONNX's ``<name>.onnx.data``)."""
    path = Path(path)
    name = path.name[: -len(path.suffix)] if path.suffix.lower() == ".pte" else path.name
    return path.with_name(name + ".ptd")


def export_executorch(model: DecoderLM, path: str | Path, *, max_context: int, quantize: str = "fp32",
                      external_weights: bool = False) -> Path:
    """Write ``model`` as an ExecuTorch program (methods ``prefill``, ``decode``, ``max_context``) to ``path``.

    Args:
        model: the model to export.
        path: the ``.pte`` file to write.
        max_context: the most tokens the program's memory plan holds (prompt and continuation).
        quantize: ``fp32``, ``int8`` or ``int4`` weights.
        external_weights: write the weights, each once, to ``data_path_for(path)`` beside the program (the
            two files go together), not inside it. Without it, a ``.ptd`` left there by an earlier export is
            removed. The files are written in a staging folder beside ``path`` and moved into place as a set
            (``psattn.export.staging``): a failure or a stop signal midway leaves an earlier export at ``path``
            as it was.

    Returns:
        The program's path. [Run the exported model](../exported.md) runs it in ExecuTorch's runtime
        (the page is run by the test suite).
    """
    if max_context < 2:
        raise ValueError(f"max_context must be at least 2 tokens, got {max_context}")
    check_exportable_dtype(model, "ExecuTorch's portable runtime", (torch.float32, torch.float64))
    check_quantizable(model, quantize)
    check_exportable(model)  # what the program cannot hold is refused before any folder is made
    path = Path(path)
    with staged_files(path, lambda target: [data_path_for(target)]) as staged:
        write_executorch_files(model, staged, max_context=max_context, quantize=quantize,
                               external_weights=external_weights)
    return path


@torch.no_grad()
def write_executorch_files(model: DecoderLM, path: Path, *, max_context: int, quantize: str,
                           external_weights: bool) -> Path:
    """``export_executorch``'s program, and with ``external_weights`` its weights file, written at ``path`` one
    after the other: into a staging folder (``export_executorch``'s own, or that of ``executorch_and_compare``,
    which moves them in with its other programs and summary)."""
    with _quiet():
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    model = quantized_copy(on_cpu(model), quantize)
    prefill, decode = PrefillGraph(model), DecodeStepGraph(model)
    # example lengths inside the planned ranges, and above 1 where the length is dynamic (torch.export
    # specializes a dimension whose example is 1): a prompt of 2..5 tokens, a cache of 1..5
    ids = example_prompt(model, (1, min(5, max_context)))  # (1, T)
    past_len = min(5, max_context - 1)
    state = prefill(ids[:, :past_len])[1:]  # the cache after past_len tokens
    seq = torch.export.Dim("seq", min=1, max=max_context)
    # max_context 2: the decode step always follows one token, a fixed cache length
    cache_dims = {3: torch.export.Dim("past", min=1, max=max_context - 1)} if past_len > 1 else {}
    decode_dims: tuple[Any, ...] = ({}, cache_dims, cache_dims, *({} for _ in state[2:]))  # one per tensor
    data = data_path_for(path)
    tag = data.name  # ExecuTorch names the data file after the tag its weights carry
    with _quiet():
        programs = {"prefill": torch.export.export(prefill, (ids,), dynamic_shapes={"input_ids": {1: seq}}),
                    # the graph's last raw key (and query) come as one argument, *last
                    "decode": torch.export.export(decode, (ids[:, :1], *state),
                                                  dynamic_shapes=decode_dims[:3] + ((decode_dims[3:],) * bool(state[2:])))}
        if external_weights:
            programs = {"prefill": _weights_tagged(programs["prefill"], (ids,), ({1: seq},), tag),
                        "decode": _weights_tagged(programs["decode"], (ids[:, :1], *state), decode_dims, tag)}
        lowered = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()],
                                              constant_methods={"max_context": max_context})
        program = lowered.to_executorch(ExecutorchBackendConfig(external_constants=(lambda node: tag) if external_weights
                                                                else False))
    if external_weights:  # ExecuTorch names the file after the tag, in the folder it is given
        program.write_tensor_data_to_file(str(path.parent))
    write_bytes(path, program.buffer)
    return path


def _weights_tagged(program: Any, args: tuple, dynamic_shapes: tuple, tag: str) -> Any:
    """``program`` exported again with the weights XNNPACK will hold tagged ``tag``, so that they go to the data
    file of that name (ExecuTorch's way: the tag goes on the constants of the unlifted graph); the weights left
    outside XNNPACK are tagged as the program is written (``ExecutorchBackendConfig.external_constants``). Both
    go to one file, which keeps equal bytes (a tied table) once."""
    from executorch.exir.passes.external_constants_pass import delegate_external_constants_pass_unlifted

    unlifted = program.module()  # takes its inputs flat: one dynamic shape per tensor
    delegate_external_constants_pass_unlifted(unlifted, lambda node: tag)
    return torch.export.export(unlifted, args, dynamic_shapes=dynamic_shapes)


class ExecuTorchLM:
    """An exported program in ExecuTorch's Python runtime, with its weights file ``data_path_for(path)`` where
    there is one; the same interface as ``OnnxLM``."""

    def __init__(self, path: str | Path):
        from executorch.runtime import Runtime

        path = Path(path)
        data = data_path_for(path)
        self.data_path = data if data.is_file() else None
        with _quiet():
            self.program = Runtime.get().load_program(path, data_path=self.data_path)
            try:
                self.prefill = self.program.load_method("prefill")
            except RuntimeError as err:  # ExecuTorch says only "error: 0x:2" when the weights are elsewhere
                if self.data_path is None:
                    raise FileNotFoundError(f"{path} did not load without a weights file beside it, and {data} "
                                            "is missing: a program exported with external weights needs its .ptd "
                                            f"in the same folder ({err})") from None
                raise
            self.decode = self.program.load_method("decode")
            self.max_context = int(self.program.load_method("max_context").execute([])[0])
            self.vocab_size = int(self.prefill.metadata.output_tensor_meta(0).sizes()[-1])  # logits (1, T, V)

    def _check_length(self, length: int) -> None:
        if length > self.max_context:
            raise ValueError(f"the program plans memory for {self.max_context} tokens; {length} asked")

    def logits(self, input_ids: np.ndarray) -> np.ndarray:
        """(B, T) -> (B, T, V), one row at a time (the program takes batch 1, as on a device); token ids
        outside [0, V) are a ValueError, as in PyTorch."""
        rows = check_token_ids(input_ids, self.vocab_size)
        self._check_length(rows.shape[1])
        if rows.shape[0] == 0 or rows.shape[1] == 0:  # nothing to run (the program takes at least one token)
            return np.zeros((*rows.shape, self.vocab_size), dtype=np.float32)
        # each row (1, T) -> logits (1, T, V); all (B, T, V)
        return np.concatenate([self.prefill.execute([torch.from_numpy(row[None])])[0].numpy() for row in rows])

    def generate(self, input_ids: np.ndarray, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Greedy decoding of each row: prefill once, then one decode step per token. Returns the
        sequences (B, T + n) and the logits each new token was chosen from (B, n, V)."""
        rows = check_token_ids(input_ids, self.vocab_size)
        check_new_tokens(rows, max_new_tokens)
        self._check_length(rows.shape[1] + max(max_new_tokens, 1) - 1)  # the last new token is not fed back
        if rows.shape[0] == 0:  # no row: nothing to run
            return (np.zeros((0, rows.shape[1] + max_new_tokens), dtype=np.int64),
                    np.zeros((0, max_new_tokens, self.vocab_size), dtype=np.float32))
        if max_new_tokens == 0:
            return rows, np.zeros((rows.shape[0], 0, self.vocab_size), dtype=np.float32)
        runs = [self._generate_row(row, max_new_tokens) for row in rows]
        return np.stack([r[0] for r in runs]), np.stack([r[1] for r in runs])  # (B, T + n), (B, n, V)

    def _generate_row(self, row: np.ndarray, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        outputs = self.prefill.execute([torch.from_numpy(row[None])])
        logits, state = outputs[0][:, -1], list(outputs[1:])  # (1, V)
        tokens, chosen_from = [], []
        for step in range(max_new_tokens):
            token = torch.from_numpy(greedy_tokens(logits.numpy()))  # (1, 1)
            tokens.append(int(token))
            chosen_from.append(logits[0].numpy())
            if step + 1 < max_new_tokens:
                outputs = self.decode.execute([token, *state])
                logits, state = outputs[0][:, -1], list(outputs[1:])
        return np.concatenate([row, np.array(tokens, dtype=np.int64)]), np.stack(chosen_from)  # (T + n,), (n, V)


@contextlib.contextmanager
def _quiet():
    """Hold back the exporters' and torchao's warnings about their own internals."""
    loggers = [logging.getLogger(name) for name in ("torch._export", "torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
