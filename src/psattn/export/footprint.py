"""What a model needs on a device: flash for its weights, RAM for its KV cache and for one decode step.

- Weights: every matrix (embedding, projections, MLP) at fp32, INT8 (one signed byte a weight and one
  fp32 scale per output row: symmetric per-channel, as ONNX Runtime's and XNNPACK's weight-only INT8
  store them) or INT4 (half a byte a weight and one fp32 scale per group of 32 weights of a row, the
  common grouped INT4 layout); vectors (norms, biases) stay fp32. A tied LM head is stored once.
- KV cache (fp32): per token and layer, the sheared keys and the values of every KV head; plus PSA's
  fixed state per layer, one raw key per KV head when gamma_k != 0 and one raw query per head when
  gamma_q != 0, the same at any context (none for the plain model). ``measured_cache_bytes``
  fills a real cache and counts its tensors.
- One decode step: the fp32 tensors the step creates (residual, normalised input, q, k, v, the scores
  over the context, the attention output, the MLP's hidden layer, the logits), summed: an upper bound on
  what it holds at once, without the runtime itself.
- Measured (``measured_decode_rss``): the peak resident memory of a fresh process that decodes
  with the model in PyTorch or in ONNX Runtime (fp32 or INT8 graphs, without torch), and how much of it
  the model, cache and loop add to the interpreter and the runtime (Linux: /proc's high-water mark).
"""

from __future__ import annotations

import json
import numbers
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from psattn.models.decoder import DecoderLM
from psattn.models.device import model_device
from psattn.progress import progress_bar

KIB, MIB = 1024, 1024 * 1024
SRAM_BUDGETS = {"256 KB SRAM": 256 * KIB, "512 KB SRAM": 512 * KIB, "2 MB SRAM": 2 * MIB}
FLASH_BUDGETS = {"1 MB flash": MIB, "4 MB flash": 4 * MIB}
INT4_GROUP = 32
FP32 = 4


@dataclass(frozen=True)
class Footprint:
    """A model's memory on a device: weights at three precisions, its KV cache, one decode step."""
    parameters: int
    weight_bytes: dict[str, int]  # "fp32", "int8", "int4"
    context: int
    cache_bytes_per_token: int
    cache_fixed_bytes: int  # PSA's raw key (and query) per layer, independent of the context
    cache_bytes: int  # at ``context`` tokens, fixed state included
    decode_step_bytes: int  # one decode step's tensors at ``context`` tokens (upper bound)

    @property
    def ram_bytes(self) -> int:
        """KV cache at the context plus one decode step (the runtime's own memory not included)."""
        return self.cache_bytes + self.decode_step_bytes

    def fits(self) -> dict[str, bool]:
        """Which common budgets it fits: RAM (cache + one step) in each SRAM size, INT8 and INT4 weights
        in each flash size."""
        out = {name: self.ram_bytes <= size for name, size in SRAM_BUDGETS.items()}
        for name, size in FLASH_BUDGETS.items():
            out[f"INT8 weights in {name}"] = self.weight_bytes["int8"] <= size
            out[f"INT4 weights in {name}"] = self.weight_bytes["int4"] <= size
        return out

    def as_dict(self) -> dict[str, Any]:
        """The footprint as plain values, for JSON."""
        return {**asdict(self), "ram_bytes": self.ram_bytes, "fits": self.fits()}


def weight_bytes(model: torch.nn.Module) -> dict[str, int]:
    """Bytes of the model's weights at fp32, INT8 and INT4 (see the module docstring for the layouts)."""
    out = {"fp32": 0, "int8": 0, "int4": 0}
    for p in model.parameters():  # a tied weight is one parameter
        out["fp32"] += p.numel() * FP32
        if p.dim() < 2:
            out["int8"] += p.numel() * FP32
            out["int4"] += p.numel() * FP32
            continue
        rows, per_row = p.shape[0], p[0].numel()
        groups = -(-per_row // INT4_GROUP)  # a row's groups of 32 weights, the last one possibly short
        out["int8"] += p.numel() + rows * FP32
        out["int4"] += rows * (-(-per_row // 2)) + rows * groups * FP32
    return out


def cache_bytes(model: DecoderLM, context: int) -> tuple[int, int]:
    """(bytes per token, fixed bytes) of the fp32 KV cache of a batch of one. Neither depends on ``context``;
    the bytes at a context are ``per_token * context + fixed`` (``footprint``). The key-lag baselines, which
    have no cached decoding, are a ValueError."""
    per_token = fixed = 0
    for block in model.blocks:
        attn = block.attn
        if attn.key_lag is not None:
            raise ValueError(f"the key-lag baseline {attn.config.variant!r} has no cached decoding, so no KV cache to size")
        kv = attn.n_kv_heads * attn.head_dim * FP32
        per_token += 2 * kv  # sheared key and value
        fixed += (kv if attn.gamma_k != 0 else 0) + (attn.n_heads * attn.head_dim * FP32 if attn.gamma_q != 0 else 0)
    return per_token, fixed


def decode_step_bytes(model: DecoderLM, context: int) -> int:
    """Bytes of the fp32 tensors one decode step at ``context`` cached tokens creates, summed."""
    c = model.config
    assert c.d_mlp is not None  # filled in by ModelConfig
    per_layer = (2 * c.d_model  # residual and normalised input
                 + 3 * c.n_heads * c.head_dim  # q, k, v (k and v at most as wide as q)
                 + c.n_heads * (context + 1)  # scores over the cache and the new token
                 + c.n_heads * c.head_dim)  # attention output
    mlp = c.d_mlp * sum(c.layer_mlps())  # the MLP's hidden layer, where a block has one
    return FP32 * (per_layer * c.n_layers + mlp + c.d_model + c.vocab_size)


def _check_context(context: int) -> None:
    """A ValueError unless ``context`` is a whole number of tokens, at least 1."""
    if isinstance(context, bool) or not isinstance(context, numbers.Integral) or context < 1:
        raise ValueError(f"context must be a whole number of tokens, at least 1, got {context!r}")


def footprint(model: DecoderLM, context: int) -> Footprint:
    """The memory ``model`` needs at ``context`` tokens (see ``Footprint``), computed, not measured; a
    ``context`` that is not a whole number of tokens, at least 1, is a ValueError."""
    _check_context(context)  # 2.5 gave fractional bytes, "5" a TypeError from a comparison
    per_token, fixed = cache_bytes(model, context)
    return Footprint(
        parameters=model.num_parameters(), weight_bytes=weight_bytes(model), context=context,
        cache_bytes_per_token=per_token, cache_fixed_bytes=fixed, cache_bytes=per_token * context + fixed,
        decode_step_bytes=decode_step_bytes(model, context),
    )


@torch.no_grad()
def measured_cache_bytes(model: DecoderLM, context: int) -> int:
    """Bytes of a real cache after a prefill of ``context`` tokens (batch of one): what it holds. A ``context``
    that is not a whole number of tokens, at least 1, is a ValueError, as in ``footprint``."""
    _check_context(context)  # 0 measured an empty prefill, which footprint refuses
    cache = model.new_cache()
    cache.reserve(context)  # room for the prompt alone, as a cache that grows would hold more
    ids = torch.randint(0, model.config.vocab_size, (1, context), device=model_device(model))  # (1, T)
    model.eval()(ids, cache=cache)
    return cache.kv_bytes() + cache.extra_state_bytes()


def format_footprints(rows: dict[str, Footprint]) -> list[str]:
    """A markdown table, one row per model, then which budgets each fits."""
    def kb(n: int) -> str:
        return f"{n / KIB:,.1f}"
    contexts = {f.context for f in rows.values()}
    at = f"{next(iter(contexts))} tokens" if len(contexts) == 1 else "each run's context"
    lines = [f"| model | parameters | weights fp32 / INT8 / INT4 (KiB) | KV cache per token (B) | PSA fixed state (B) | "
             f"KV cache at {at} (KiB) | one decode step (KiB) | RAM: cache + step (KiB) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, f in rows.items():
        w = f.weight_bytes
        label = name if len(contexts) == 1 else f"{name}, {f.context} tokens"
        lines.append(f"| {label} | {f.parameters:,} | {kb(w['fp32'])} / {kb(w['int8'])} / {kb(w['int4'])} | "
                     f"{f.cache_bytes_per_token:,} | {f.cache_fixed_bytes:,} | {kb(f.cache_bytes)} | "
                     f"{kb(f.decode_step_bytes)} | {kb(f.ram_bytes)} |")
    lines.append("")
    for name, f in rows.items():
        fits = [budget for budget, ok in f.fits().items() if ok]
        lines.append(f"{name} fits: {', '.join(fits) if fits else 'none of the budgets'} "
                     "(the runtime's own memory not included)")
    return lines


#: what a child process of ``measured_decode_rss`` reports with: its peak and current resident memory
_MEMORY = """
import json, os, resource, sys

def peak_bytes():
    # Linux: this process image's high-water mark. getrusage's ru_maxrss would not do: exec keeps the
    # peak of the process that forked it, here the parent's
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # macOS reports bytes, Linux KiB

def resident_bytes():  # now (Linux); elsewhere the peak so far
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_bytes()

def progress(done, total):  # a line on stderr at every hundredth of the loop, for the parent's progress bar
    if done % max(1, total // 100) == 0 or done == total:
        print(f"decoded {done}", file=sys.stderr, flush=True)

def report(before):
    print(json.dumps({"runtime_bytes": before, "after_bytes": resident_bytes(), "peak_bytes": peak_bytes(),
                      "torch_imported": "torch" in sys.modules}))
"""

#: PyTorch: the run's model decodes with its cache
_PYTORCH_CHILD = _MEMORY + """
import torch
torch.set_num_threads(1)
from psattn.training.run_dir import load_trained

run_dir, context = sys.argv[1], int(sys.argv[2])
before = resident_bytes()
model = load_trained(run_dir)
cache = model.new_cache() if model.supports_cache else None
if cache is not None:
    cache.reserve(context)  # room for the context alone: a cache that grows would hold up to a quarter more
token = torch.zeros(1, 1, dtype=torch.long)
with torch.no_grad():
    for done in range(context):
        logits = model(token, cache=cache)[:, -1]
        token = logits.argmax(-1, keepdim=True)
        progress(done + 1, context)
report(before)
"""

#: ONNX Runtime alone (no torch, no psattn): the exported prefill graph on one token, then decode steps
#: that carry the cache state (``psattn.export.onnx.OnnxLM.generate``, written out without its imports)
_ONNX_CHILD = _MEMORY + """
import numpy as np
import onnxruntime as ort

prefill_path, decode_path, context = sys.argv[1], sys.argv[2], int(sys.argv[3])
before = resident_bytes()
options = ort.SessionOptions()
options.intra_op_num_threads = options.inter_op_num_threads = 1
prefill = ort.InferenceSession(prefill_path, options, providers=["CPUExecutionProvider"])
decode = ort.InferenceSession(decode_path, options, providers=["CPUExecutionProvider"])
names = [i.name for i in decode.get_inputs()]
outputs = prefill.run(None, {"input_ids": np.zeros((1, 1), dtype=np.int64)})
for done in range(1, context):
    token = outputs[0][:, -1].argmax(-1)[:, None].astype(np.int64)  # (1, 1)
    outputs = decode.run(None, dict(zip(names, [token, *outputs[1:]])))
    progress(done + 1, context)
report(before)
"""

#: where ``measured_decode_rss`` can decode: PyTorch, or ONNX Runtime on the fp32 or the dynamic INT8
#: graphs ``psattn export`` writes
RUNTIMES = ("pytorch", "onnx", "onnx-int8")


#: the longest context ``measured_decode_rss`` decodes: one token at a time in a fresh process, a cache
#: growing with each, so the loop's time grows with the square of the context
MAX_MEASURED_CONTEXT = 65_536


def check_measurable(row: Footprint, context: int) -> None:
    """Refuse, before anything runs, a ``--measure`` context beyond ``MAX_MEASURED_CONTEXT`` or one whose
    cache and decode step (``row``'s RAM) would not fit in the memory available now."""
    from psattn.training.memory import GIB, MARGIN, available_bytes

    if context > MAX_MEASURED_CONTEXT:
        raise ValueError(f"--measure decodes one token at a time in a fresh process, up to {MAX_MEASURED_CONTEXT:,} "
                         f"tokens (asked {context:,}); the footprint table itself takes any --context")
    free = available_bytes(torch.device("cpu"))
    if free is not None and row.ram_bytes > MARGIN * free:
        raise ValueError(f"--measure at {context:,} tokens does not fit in memory: the cache and one decode step need "
                         f"{row.ram_bytes / GIB:.1f} GiB, and {free / GIB:.1f} GiB is available")


def check_runtimes(model: DecoderLM, run_dir, runtimes: list[str]) -> None:
    """Refuse, before anything runs, an ONNX Runtime measurement of a model ``psattn export`` cannot write
    (layers of different attention configs)."""
    from psattn.export.graphs import check_exportable

    onnx = [r for r in runtimes if r.startswith("onnx")]
    if onnx:
        try:
            check_exportable(model)
        except ValueError as err:
            raise ValueError(f"--measure {onnx[0]} runs the graphs psattn export writes, and {run_dir} cannot be "
                             f"exported ({err}): measure it in pytorch") from None


def measured_decode_rss(run_dir, context: int, runtime: str = "pytorch", *, progress: bool = False,
                        graphs: Path | None = None) -> dict[str, int]:
    """Resident memory of a fresh Python process that decodes ``context`` tokens one at a time with
    the cache, one thread, in ``runtime`` (``RUNTIMES``): ``runtime_bytes`` before the model is loaded
    (the interpreter and the runtime: torch, or onnxruntime and NumPy), ``model_bytes`` what the model,
    its cache and the loop hold at the end beyond that, and ``peak_bytes`` the process's peak. The ONNX
    graphs are exported (and quantized) by this process first, into ``graphs``, a folder of the run's own
    where a later call finds the fp32 export again (``psattn footprint --measure onnx onnx-int8`` exports
    once), or by default a temporary folder. Resident memory now is read from /proc (Linux); elsewhere the
    peak so far stands in for it. ``progress``: a bar of the tokens decoded so far."""
    import subprocess
    import sys
    import tempfile

    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; expected one of {RUNTIMES}")
    with tempfile.TemporaryDirectory() as tmp:
        if runtime == "pytorch":
            args = [_PYTORCH_CHILD, str(run_dir)]
        else:
            prefill, decode = _onnx_graphs(run_dir, graphs or Path(tmp), int8=runtime == "onnx-int8")
            args = [_ONNX_CHILD, str(prefill), str(decode)]
        child = subprocess.Popen([sys.executable, "-c", *args, str(context)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        assert child.stderr is not None and child.stdout is not None  # both piped
        other, seen = [], 0
        with progress_bar(total=context, enabled=progress, desc=f"decoding ({runtime})", leave=False) as bar:
            for line in child.stderr:  # "decoded N" lines, and whatever else the child says
                if line.startswith("decoded "):
                    bar.update(int(line.split()[1]) - seen)
                    seen = int(line.split()[1])
                else:
                    other.append(line.rstrip())
        stdout = child.stdout.read()
        child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"the decode-loop process failed: {other[-1:]}")
    out = json.loads(stdout.strip().splitlines()[-1])
    return {**out, "model_bytes": out["after_bytes"] - out["runtime_bytes"]}


def _onnx_graphs(run_dir, folder: Path, int8: bool):
    """The run's prefill and decode graphs in ``folder``, fp32 or dynamic INT8 as ``psattn export --int8``
    writes them (the value projections in fp32; the weights once, in a file both graphs read); the fp32
    export found there by an earlier call is used again, and the INT8 one made from it."""
    from psattn.export.onnx import OnnxPaths, data_path_for, decode_path_for, export_onnx, quantize_int8, share_weights
    from psattn.export.quantize import fp32_nodes
    from psattn.training.run_dir import load_trained

    model = load_trained(run_dir)
    prefill_path = folder / "model.onnx"
    if data_path_for(prefill_path).exists():  # written last: the earlier call's export is whole
        paths = OnnxPaths(prefill_path, decode_path_for(prefill_path), data_path_for(prefill_path))
    else:
        paths = export_onnx(model, prefill_path)
    if not int8:
        return paths.prefill, paths.decode
    prefill = quantize_int8(paths.prefill, folder / "model.int8.onnx", exclude=fp32_nodes(paths.prefill, model))
    decode = quantize_int8(paths.decode, decode_path_for(prefill), exclude=fp32_nodes(paths.decode, model))
    share_weights(prefill, decode)
    return prefill, decode


def format_rss(rows: dict[str, dict[str, dict[str, Any]]], contexts: dict[str, int]) -> list[str]:
    """The measured peak memory of each decode loop (model -> runtime -> ``measured_decode_rss``), as
    markdown lines; ``contexts``: the tokens each model decoded."""
    same = len(set(contexts.values())) == 1
    tokens = f"{next(iter(contexts.values()))} tokens" if same else "its context's tokens"
    lines = [f"Measured: a fresh Python process decoding {tokens} with the cache, one thread:", "",
             "| model | runtime | process peak RSS (MiB) | before the model: interpreter and runtime (MiB) | held by "
             "model, cache and loop at the end (MiB) |", "|---|---|---|---|---|"]
    for name, by_runtime in rows.items():
        label = name if same else f"{name}, {contexts[name]} tokens"
        lines += [f"| {label} | {runtime} | {r['peak_bytes'] / MIB:.1f} | {r['runtime_bytes'] / MIB:.1f} | "
                  f"{r['model_bytes'] / MIB:.1f} |" for runtime, r in by_runtime.items()]
    return lines
