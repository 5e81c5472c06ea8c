"""One cached decode step of a transformers model with PSA against the same model without it, for one
model type per attention family (``psattn.integrations.hf.support.REPRESENTATIVES``).

Each model is a random one of its family at the size given (default: 2 layers, hidden 512, 8 heads
of 64 channels, 512 cached tokens, batch 4, fp32, CPU; ``--device cuda --dtype bfloat16`` on a GPU).
The plain and the patched copy each decode one token from their cache of the prompt, interleaved
(A, B, then B, A, ...), and the ratio of their median times is printed. Only the decode step is timed: each
cache is cropped back to the prompt after it, untimed, so that every step sees the same number of
cached tokens. Usage:

    python benchmarks/hf_decode_speed.py [--types llama phi ...] [--length 512 --threads 1 --repeats 30]
                                         [--keep-freed-memory] [--device cuda --dtype bfloat16] [--compile]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import json
import logging
import platform
import sys
import time
from datetime import datetime, timezone

import torch
import transformers
from cpu_memory import keep_freed_memory
from cpu_threads import checked_device, parse_with_threads

from psattn.arguments import positive_int
from psattn.integrations.hf import apply_psa
from psattn.integrations.hf.support import REPRESENTATIVES, TINY, base_kernel, tiny_config
from psattn.provenance import git_revision
from psattn.timing import interleaved_medians

SIZE = dict(hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=8, head_dim=64,
            vocab_size=1000, max_position_embeddings=4096, initializer_range=0.02)
# fields a family names differently or derives from the others
SIZE_EXCEPTIONS = {"falcon": dict(head_dim=None, num_kv_heads=8), "gptj": dict(head_dim=None, rotary_dim=16),
                   "codegen": dict(head_dim=None, rotary_dim=16)}


# transformers 5.24 renamed the forward argument past_key_values to cache
CACHE = "cache" if "cache" in inspect.signature(transformers.LlamaForCausalLM.forward).parameters else "past_key_values"


def model_pair(model_type: str):
    """(plain, PSA) copies of one random model of ``model_type`` at the benchmark's size."""
    fields = {**SIZE, **SIZE_EXCEPTIONS.get(model_type, {})}
    if "sliding_window" in TINY[model_type]:  # a window wider than the cache: plain sliding layers cannot crop
        fields["sliding_window"] = 4096
    config = tiny_config(model_type, **{k: v for k, v in fields.items() if v is not None})
    torch.manual_seed(0)
    plain = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=base_kernel(model_type), experts_implementation="eager").eval()
    psa = apply_psa(copy.deepcopy(plain), "symmetric", 0.8, attn_implementation=base_kernel(model_type))
    return plain, psa


def decode_step_seconds(model_type: str, batch: int, length: int, repeats: int, device: torch.device | str = "cpu",
                        dtype: torch.dtype = torch.float32, compile: bool = False) -> dict[str, float]:
    """Median seconds of one cached decode step of the plain and the PSA model of ``model_type`` (on a GPU,
    its device time between two CUDA events); with ``compile``, of each model under ``torch.compile``."""
    plain, psa = (model.to(device, dtype) for model in model_pair(model_type))
    if compile:
        plain, psa = torch.compile(plain), torch.compile(psa)
    prompt = torch.randint(1, 1000, (batch, length), device=device)
    step = torch.randint(1, 1000, (batch, 1), device=device)
    timer = _step_timer(torch.device(device))
    runs = {}
    for name, model in (("plain", plain), ("psa", psa)):
        with torch.no_grad():
            out = model(prompt, use_cache=True)
            cache = getattr(out, "cache", None) or out.past_key_values

        def run(model=model, cache=cache) -> float:
            with torch.no_grad(), timer() as seconds:
                model(step, **{CACHE: cache}, use_cache=True)
            cache.crop(-1)  # drop the new token again: every call sees `length` cached tokens
            return seconds[0]
        runs[name] = run
    # compiled, the first steps compile their graphs (the prefill's, then the decode step's)
    return interleaved_medians(runs, repeats, warmup=6 if compile else 3, measure=lambda run: run())


def _step_timer(device: torch.device):
    """A context manager that times its body into the one-element list it yields: the wall clock, or on a
    GPU the device time between two events (synchronised after the body)."""
    @contextlib.contextmanager
    def timed():
        seconds = [0.0]
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield seconds
            end.record()
            torch.cuda.synchronize()
            seconds[0] = start.elapsed_time(end) / 1e3
        else:
            start_s = time.perf_counter()
            yield seconds
            seconds[0] = time.perf_counter() - start_s
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    # a hybrid's linear-attention cache layers cannot be cropped back, which each timed step needs
    parser.add_argument("--types", nargs="+", default=[t for t in REPRESENTATIVES if t != "olmo_hybrid"])
    parser.add_argument("--batch", type=positive_int, default=4)
    parser.add_argument("--length", type=positive_int, default=512)
    parser.add_argument("--repeats", type=positive_int, default=30)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="the models' dtype")
    parser.add_argument("--compile", action="store_true", help="time both models under torch.compile")
    parser.add_argument("--json", action="store_true",
                        help="also print the run as one JSON line: its results, command, date, git revision and machine")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="glibc's malloc keeps freed memory, as jemalloc and tcmalloc do (CPU)")
    args = parse_with_threads(parser)
    unknown = [t for t in args.types if t not in TINY]
    if unknown:
        parser.error(f"--types: no model type {', '.join(unknown)}; the types are {', '.join(sorted(TINY))}")
    if "olmo_hybrid" in args.types:
        parser.error("--types: olmo_hybrid's linear-attention cache cannot be cropped back after a step, "
                     "which each timed step needs")
    checked_device(parser, args.device)
    if args.keep_freed_memory:
        keep_freed_memory()
    logging.disable(logging.WARNING)
    rows = {}
    print(f"{'model type':20s}{'plain ms':>10s}{'PSA ms':>10s}{'ratio':>8s}   ({args.device}, {args.dtype}"
          + (", compiled)" if args.compile else ")"))
    for model_type in args.types:
        t = decode_step_seconds(model_type, args.batch, args.length, args.repeats, args.device,
                                getattr(torch, args.dtype), args.compile)
        rows[model_type] = t
        print(f"{model_type:20s}{t['plain'] * 1e3:10.2f}{t['psa'] * 1e3:10.2f}{t['psa'] / t['plain']:8.3f}", flush=True)
    if args.json:  # the run's record, as docs/results/cpu/hf_decode/ saves it
        device = torch.device(args.device)
        print(json.dumps({
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", "benchmarks/hf_decode_speed.py", *sys.argv[1:]]), "git": git_revision(),
            "machine": platform.platform(), "cpu": platform.machine(),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "transformers": transformers.__version__, "threads": args.threads,
            "dtype": args.dtype, "compiled": args.compile, "batch": args.batch, "length": args.length, "repeats": args.repeats,
            "results": {k: {**v, "ratio": v["psa"] / v["plain"]} for k, v in rows.items()},
        }))


if __name__ == "__main__":
    main()
