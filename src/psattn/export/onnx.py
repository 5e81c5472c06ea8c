"""Export a DecoderLM to ONNX (standard operators only), run it in ONNX Runtime, quantize to INT8.

``export_onnx`` writes two graphs: ``<name>.onnx``, the full forward that also returns the cache
state (prefill), and ``<name>.decode.onnx``, one cached decode step (see ``.graphs``), and their
weights once, in ``<name>.onnx.data`` beside them, which both graphs read (ONNX external data;
``share_weights``). ``OnnxLM`` drives them: logits of a whole sequence, and a greedy decode loop.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

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
    kept_modes,
)
from psattn.export.staging import staged_files
from psattn.files import atomic_write
from psattn.models.decoder import DecoderLM
from psattn.models.device import on_cpu

log = logging.getLogger(__name__)

STANDARD_DOMAINS = ("", "ai.onnx")


@dataclass
class OnnxPaths:
    """The two graphs ``export_onnx`` writes, prefill and decode step, and the weights file both read."""
    prefill: Path
    decode: Path
    data: Path


def _name(path: Path) -> str:
    """The file name of ``path`` less a ``.onnx`` suffix (only that one: ``model.v1`` stays ``model.v1``, so that
    the companions of ``model.v1`` and ``model.v2`` differ)."""
    return path.name[: -len(path.suffix)] if path.suffix.lower() == ".onnx" else path.name


def decode_path_for(path: str | Path) -> Path:
    """Where the decode step goes beside the prefill graph ``path``: ``<name>.decode.onnx``, ``<name>`` being
    the file name less a ``.onnx`` suffix."""
    path = Path(path)
    return path.with_name(_name(path) + ".decode.onnx")


def data_path_for(path: str | Path) -> Path:
    """Where the weights of the prefill graph ``path`` and of its decode step go: ``<name>.onnx.data``,
    ``<name>`` as in ``decode_path_for``."""
    path = Path(path)
    return path.with_name(_name(path) + ".onnx.data")


def int8_path_for(path: str | Path, mode: str) -> Path:
    """Where the INT8 copy (``mode`` "dynamic" or "static") of the prefill graph ``path`` goes:
    ``<name>.int8-<mode>.onnx``, ``<name>`` as in ``decode_path_for``."""
    path = Path(path)
    return path.with_name(f"{_name(path)}.int8-{mode}.onnx")


def _export(graph, args, path: Path, dynamic_shapes) -> None:
    # the exporter logs a warning per torchvision operator it cannot register when torchvision is absent
    with warnings.catch_warnings(), _quiet("torch.onnx._internal.exporter._registration"):
        warnings.simplefilter("ignore")
        torch.onnx.export(graph, args, str(path), input_names=graph.input_names(), output_names=graph.output_names(),
                          dynamic_shapes=dynamic_shapes, dynamo=True, external_data=False, verbose=False)
    _unfold_tied_head(path)


def _unfold_tied_head(path: Path) -> None:
    """Store a tied LM head's weight once in the graph at ``path``. The exporter's constant folding (onnxscript's)
    turns the head's Transpose of the embedding table into an initializer of its own when the table has at most
    8192 entries (vocab 64 at width 128), so the graph held the table twice, once transposed; a larger table keeps
    the Transpose, which ONNX Runtime folds when it loads the graph. Each initializer that holds the transpose of
    a Gather's table becomes that Transpose again, as for a larger table."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    tables = {n.input[0]: numpy_helper.to_array(initializers[n.input[0]]) for n in graph.node
              if n.op_type == "Gather" and n.input[0] in initializers and len(initializers[n.input[0]].dims) == 2}
    folded = {}  # initializer name -> the table it transposes
    for t in graph.initializer:
        if t.name in tables or len(t.dims) != 2 or not any(t.name in node.input for node in graph.node):
            continue
        a = numpy_helper.to_array(t)
        source = next((name for name, table in tables.items()
                       if table.shape == a.shape[::-1] and table.dtype == a.dtype and np.array_equal(table.T, a)), None)
        if source is not None:
            folded[t.name] = source
    if not folded:
        return
    kept = [t for t in graph.initializer if t.name not in folded]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for name, table in folded.items():  # just before its first reader, where the exporter puts a Transpose it keeps
        # (ONNX Runtime's dynamic quantizer then sees the Gather first and transposes the table it quantized)
        first = next(i for i, node in enumerate(graph.node) if name in node.input)
        graph.node.insert(first, helper.make_node("Transpose", [table], [name], name=f"transpose_{name}", perm=[1, 0]))
    onnx.save(model, str(path))


#: initializers of at least this many bytes go to the shared weights file; smaller ones (shapes, indices, the
#: odd scalar) stay inside each graph
SHARED_BYTES = 1024
#: tensors of at least this many bytes start at a multiple of the page size in that file, where ONNX Runtime maps
#: them into memory instead of reading them into a buffer of each session's own
MAPPED_BYTES = 64 * 1024
PAGE = 4096
_TENSOR_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def share_weights(prefill: str | Path, decode: str | Path) -> Path:
    """Store the weights of the graphs ``prefill`` and ``decode`` once, in ``data_path_for(prefill)`` beside
    them (ONNX external data, which ONNX Runtime reads wherever the graphs go with it): each initializer
    of at least ``SHARED_BYTES`` moves there, and an initializer the other graph holds with the same dtype,
    shape and bytes (every weight, fp32 or quantized alike: both graphs are of one model) points at the same
    place. Also drops the exporter's debugging metadata on each node (the exporting process's stack
    traces, most of a small graph's bytes). Returns the weights file."""
    import onnx
    from onnx import numpy_helper

    paths = [Path(prefill), Path(decode)]
    data = data_path_for(paths[0])
    models = [onnx.load(str(p)) for p in paths]  # with any external data they already read
    places: dict[tuple, list] = {}  # (dtype, shape, digest) -> [bytes, offset], first seen first
    for model in models:
        for node in model.graph.node:
            del node.metadata_props[:]
        for tensor in model.graph.initializer:
            raw = numpy_helper.to_array(tensor).tobytes()
            if len(raw) >= SHARED_BYTES:
                places.setdefault((tensor.data_type, tuple(tensor.dims), hashlib.sha256(raw).digest()), [raw, 0])
    def write(f: IO[bytes]) -> None:  # mapped tensors first, each at a page boundary, then the rest packed
        for place in sorted(places.values(), key=lambda place: len(place[0]) < MAPPED_BYTES):
            if len(place[0]) >= MAPPED_BYTES:
                f.write(b"\0" * (-f.tell() % PAGE))
            place[1] = f.tell()
            f.write(place[0])

    # a new file renamed into place, not the old one rewritten: sessions of an earlier export to this path map its
    # pages; written whole (psattn.files): a failure or a stop leaves no temporary file beside it
    atomic_write(data, write)
    for model, path in zip(models, paths, strict=True):
        for tensor in model.graph.initializer:
            raw = numpy_helper.to_array(tensor).tobytes()
            if len(raw) >= SHARED_BYTES:
                offset = places[(tensor.data_type, tuple(tensor.dims), hashlib.sha256(raw).digest())][1]
                for field in _TENSOR_FIELDS:
                    tensor.ClearField(field)
                tensor.data_location = onnx.TensorProto.EXTERNAL
                del tensor.external_data[:]
                for key, value in (("location", data.name), ("offset", offset), ("length", len(raw))):
                    entry = tensor.external_data.add()
                    entry.key, entry.value = key, str(value)
        onnx.save(model, str(path))
    return data


def nonstandard_ops(path: str | Path) -> list[str]:
    """Operators of the graph outside the standard ONNX domain (should be none)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return sorted({f"{n.domain}::{n.op_type}" for n in graph.node if n.domain not in STANDARD_DOMAINS})


@torch.no_grad()
def export_onnx(model: DecoderLM, path: str | Path) -> OnnxPaths:
    """Write the prefill graph to ``path``, the decode-step graph beside it, and their weights once.

    Args:
        model: the model to export (a trained one: ``load_trained(run_dir)``).
        path: the prefill graph's file; the decode step goes beside it as ``<name>.decode.onnx``, and the
            weights both read as ``<name>.onnx.data`` (``share_weights``): the three files go together. They are
            written in a staging folder beside ``path`` and moved into place as a set (``psattn.export.staging``):
            a failure or a stop signal midway leaves an earlier export at ``path`` as it was.

    Returns:
        ``OnnxPaths`` of the two graphs and the weights. [Run the exported model](../exported.md) shows
        their inputs, outputs and the cache loop in ONNX Runtime.

    Examples:
        >>> import tempfile, numpy as np, torch
        >>> from psattn import AttentionConfig, DecoderLM, ModelConfig
        >>> from psattn.export import OnnxLM, export_onnx
        >>> model = DecoderLM(ModelConfig(vocab_size=32, d_model=32, n_heads=2, attention=AttentionConfig("key_only", 1.0)))
        >>> paths = export_onnx(model.eval(), tempfile.mkdtemp() + "/model.onnx")
        >>> paths.decode.name
        'model.decode.onnx'
        >>> ids = np.array([[1, 2, 3, 4]])
        >>> with torch.no_grad():
        ...     expected = model(torch.from_numpy(ids)).numpy()
        >>> bool(np.allclose(OnnxLM(paths.prefill).logits(ids), expected, atol=1e-4))
        True
    """
    check_exportable_dtype(model, "ONNX Runtime", (torch.float32, torch.float16))
    check_exportable(model)  # a model it cannot export is refused before any folder is made
    path = Path(path)
    # the staged files keep their final names: the graphs name their weights file by its name alone
    with staged_files(path, lambda target: [decode_path_for(target), data_path_for(target)]) as staged:
        write_onnx_files(model, staged)
    return OnnxPaths(path, decode_path_for(path), data_path_for(path))


@torch.no_grad()
def write_onnx_files(model: DecoderLM, path: Path) -> OnnxPaths:
    """``export_onnx``'s three files, written at ``path`` one after the other: into a staging folder (``export_onnx``'s
    own, or that of ``export_and_compare``, which moves them in with its INT8 copies and summary)."""
    model = on_cpu(model)
    with kept_modes(model):  # the graphs run the model in eval mode; the caller's keeps its own
        prefill = PrefillGraph(model)
        decode = DecodeStepGraph(model)
        batch, seq, past = torch.export.Dim("batch", min=1), torch.export.Dim("seq", min=2), torch.export.Dim("past", min=1)
        ids = example_prompt(model, (2, 5))  # (B, T)
        _export(prefill, (ids,), path, {"input_ids": {0: batch, 1: seq}})
        state = prefill(ids)[1:]
        cache_dims = {1: batch, 3: past}
        raw_dims = tuple({1: batch} for _ in state[2:])  # last raw key / query: one position each
        dynamic = ({0: batch}, cache_dims, cache_dims) + ((raw_dims,) if raw_dims else ())
        _export(decode, (ids[:, :1], *state), decode_path_for(path), dynamic)
    for p in (path, decode_path_for(path)):
        extra = nonstandard_ops(p)
        if extra:
            raise RuntimeError(f"{p} uses non-standard operators {extra}")
    return OnnxPaths(path, decode_path_for(path), share_weights(path, decode_path_for(path)))


class OnnxLM:
    """An exported model in ONNX Runtime (CPU)."""

    def __init__(self, prefill_path: str | Path, decode_path: str | Path | None = None, threads: int = 1):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        self.prefill_path = Path(prefill_path)
        self.decode_path = Path(decode_path or decode_path_for(prefill_path))
        self.prefill = ort.InferenceSession(str(self.prefill_path), options, providers=providers)
        self.decode = ort.InferenceSession(str(self.decode_path), options, providers=providers)
        self.decode_inputs = [i.name for i in self.decode.get_inputs()]
        self.vocab_size = int(self.prefill.get_outputs()[0].shape[-1])

    def logits(self, input_ids: np.ndarray) -> np.ndarray:
        """(B, T) -> (B, T, V); token ids outside [0, V) are a ValueError, as in PyTorch."""
        input_ids = check_token_ids(input_ids, self.vocab_size)
        if input_ids.shape[1] == 0:  # no position: nothing to run (the graph takes at least one token)
            return np.zeros((*input_ids.shape, self.vocab_size), dtype=np.float32)
        return self.prefill.run(["logits"], {"input_ids": input_ids})[0]

    def generate(self, input_ids: np.ndarray, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Greedy decoding: prefill once, then one decode step per token. Returns the sequences
        (B, T + n) and the logits each new token was chosen from (B, n, V)."""
        input_ids = check_token_ids(input_ids, self.vocab_size)
        check_new_tokens(input_ids, max_new_tokens)
        if max_new_tokens == 0:
            return input_ids, np.zeros((input_ids.shape[0], 0, self.vocab_size), dtype=np.float32)
        outputs = self.prefill.run(None, {"input_ids": input_ids})
        logits, state = outputs[0][:, -1], outputs[1:]
        tokens, chosen_from = [], []
        for step in range(max_new_tokens):
            token = greedy_tokens(logits)  # (B, 1)
            tokens.append(token)
            chosen_from.append(logits)
            if step + 1 < max_new_tokens:
                outputs = self.decode.run(None, dict(zip(self.decode_inputs, [token, *state], strict=True)))
                logits, state = outputs[0][:, -1], outputs[1:]
        return np.concatenate([input_ids, *tokens], axis=1), np.stack(chosen_from, axis=1)  # (B, T + n), (B, n, V)


    def decode_feeds(self, input_ids: np.ndarray, steps: int) -> list[dict[str, np.ndarray]]:
        """The decode graph's inputs along a greedy continuation of ``input_ids`` (calibration data)."""
        input_ids = check_token_ids(input_ids, self.vocab_size)
        check_new_tokens(input_ids, steps)
        outputs = self.prefill.run(None, {"input_ids": input_ids})
        feeds = []
        for _ in range(steps):
            token = greedy_tokens(outputs[0][:, -1])  # (B, 1)
            feeds.append(dict(zip(self.decode_inputs, [token, *outputs[1:]], strict=True)))
            outputs = self.decode.run(None, feeds[-1])
        return feeds


INT8_MODES = ("dynamic", "static")


class _Feeds:
    """ONNX Runtime's CalibrationDataReader protocol over a list of input dicts."""

    def __init__(self, feeds: Iterable[dict[str, np.ndarray]]):
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def quantize_int8(src: str | Path, dst: str | Path, calibration: Iterable[dict[str, np.ndarray]] | None = None,
                  nodes: list[str] | None = None, exclude: Iterable[str] = ()) -> Path:
    """INT8 copy of a graph, its weights per channel in 7 bits (``reduce_range``: on x86 CPUs without VNNI,
    AVX2 only, 8-bit weights saturate ONNX Runtime's int8 kernels, dynamic and static alike). Without
    ``calibration``: dynamic (``quantize_dynamic``: INT8 weights, activation ranges found at run time).
    With it, a list of input dicts: static QDQ (``quantize_static``) of every MatMul, weights and
    activations, q̂ and k̂ among them, at ranges fixed by min/max over the calibration inputs, except the LM
    head, which stays fp32 (alone it costs more fidelity than any other MatMul: docs/edge.md); the
    elementwise operators (RoPE, the shear, the norms) stay in fp32. ``nodes``: quantize only the
    MatMuls of these names, the head included if named (the rest stay fp32; see
    ``psattn.export.int8_ablation``); ``exclude``: keep these nodes in fp32 too (in either mode; the
    export's choice is ``psattn.export.quantize.fp32_nodes``)."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static

    with warnings.catch_warnings(), _quiet("root"):
        warnings.simplefilter("ignore")
        if calibration is None:
            quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True,
                             nodes_to_quantize=nodes, nodes_to_exclude=list(exclude))
        else:
            quantize_static(str(src), str(dst), _Feeds(calibration), quant_format=QuantFormat.QDQ,
                            op_types_to_quantize=["MatMul"], per_channel=True, activation_type=QuantType.QInt8,
                            weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax, reduce_range=True,
                            nodes_to_quantize=nodes,
                            nodes_to_exclude=list(exclude) + (lm_head_nodes(src) if nodes is None else []))
    return Path(dst)


def lm_head_nodes(path: str | Path) -> list[str]:
    """The MatMul that computes the graph's ``logits`` (the LM head), found by walking back from that
    output through any operators without weights; empty if there is none."""
    import onnx

    graph = onnx.load(str(path)).graph
    producer = {out: node for node in graph.node for out in node.output}
    name = "logits"
    while name in producer:
        node = producer[name]
        if node.op_type == "MatMul":
            return [node.name]
        name = node.input[0]
    return []


@contextlib.contextmanager
def _quiet(name: str):
    """Hold back a logger's warnings (ONNX Runtime's quantizer advises pre-processing on every call)."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
