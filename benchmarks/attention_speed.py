"""PSA against plain SDPA on one shape: forward, forward+backward, one cached decode step (on the
CPU by default; ``--device cuda`` times the same rows on a GPU; ``psa_attention`` takes its default
backend on both, the shear and then SDPA).

Both sides run interleaved in the same process (A, B, then B, A, ...) and the ratio of their median
times is printed, so machine noise largely cancels. ``--keep-freed-memory`` has glibc's malloc keep
freed memory, as jemalloc and tcmalloc do, so that the ratio leaves out the page faults of PSA's two
extra streams (``cpu_memory.py``). Usage:

    python benchmarks/attention_speed.py [--batch 4 --heads 8 --length 1024 --head-dim 64 --threads 1 --device cpu]
                                         [--keep-freed-memory] [--decode-only]
"""

from __future__ import annotations

import argparse
import platform
from datetime import datetime, timezone

import torch
import torch.nn.functional as F
from cpu_memory import keep_freed_memory
from cpu_threads import checked_device, parse_with_threads

from psattn.arguments import positive_int
from psattn.files import write_json
from psattn.models import AttentionConfig, PhaseSpaceAttention, build_context
from psattn.ops import PSACache, psa_attention
from psattn.provenance import git_revision
from psattn.timing import interleaved_medians


def synced(run, device):
    """``run``, then wait for the device: a GPU's work is timed, not only its launch."""
    if device.type != "cuda":
        return run
    return lambda: (run(), torch.cuda.synchronize())


def operator_benchmarks(B, H, T, D, gamma, repeats, device):
    q, k, v = (torch.randn(B, H, T, D, device=device, requires_grad=True) for _ in range(3))
    grad = torch.randn(B, H, T, D, device=device)

    def fwd(fn):
        def run():
            with torch.no_grad():
                fn(q, k, v)
        return synced(run, device)

    def fwd_bwd(fn):
        def run():
            fn(q, k, v).backward(grad)
        return synced(run, device)

    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    psa = lambda q, k, v: psa_attention(q, k, v, gamma_q=gamma, gamma_k=gamma, is_causal=True)  # noqa: E731
    rows = {}
    for label, make in (("forward", fwd), ("forward+backward", fwd_bwd)):
        t = interleaved_medians({"sdpa": make(sdpa), "psa": make(psa)}, repeats, warmup=3)
        rows[label] = t
    return rows


def layer_benchmark(B, H, T, D, gamma, repeats, device):
    """The whole attention layer (projections, RoPE, shear, attention, output projection) forward and
    backward on a causal batch: what the shear costs a model's training step."""
    torch.manual_seed(0)
    layers = {
        "sdpa": PhaseSpaceAttention(H * D, H, attention=AttentionConfig("baseline")).to(device),
        "psa": PhaseSpaceAttention(H * D, H, attention=AttentionConfig("symmetric", gamma)).to(device),
    }
    x = torch.randn(B, T, H * D, device=device, requires_grad=True)
    runs = {name: synced(lambda layer=layer: layer(x).sum().backward(), device) for name, layer in layers.items()}
    return interleaved_medians(runs, repeats, warmup=3)


def prefilled(layer: PhaseSpaceAttention, prompt: torch.Tensor) -> PSACache:
    """The cache of ``layer`` after the prompt (B, T, C), with its positions recorded as ``DecoderLM``
    records them, so that the next token sits at position T and attends to all T cached keys."""
    B, T, _ = prompt.shape
    cache = PSACache([layer.new_cache()])
    with torch.no_grad():
        context = build_context(B, T, prompt.device, cache=cache)
        layer(prompt, context, cache.layers[0])
    cache.record(context.chunk)
    return cache


def decode_benchmark(B, H, T, D, gamma, repeats, device):
    """One new token attending to T cached tokens, through the full attention layer (projections,
    RoPE, shear, cache append, SDPA); the cache has room for it, as in a generation."""
    torch.manual_seed(0)
    layers = {
        "sdpa": PhaseSpaceAttention(H * D, H, attention=AttentionConfig("baseline")).to(device),
        "psa": PhaseSpaceAttention(H * D, H, attention=AttentionConfig("symmetric", gamma)).to(device),
    }
    prompt = torch.randn(B, T, H * D, device=device)
    step = torch.randn(B, 1, H * D, device=device)
    runs, caches = {}, {}
    for name, layer in layers.items():
        cache = caches[name] = prefilled(layer, prompt)

        def run(layer=layer, cache=cache):
            # decode one token, then roll back to the prompt so every call sees T cached tokens
            saved = cache.snapshot()
            with torch.no_grad():
                layer(step, build_context(B, 1, step.device, cache=cache), cache.layers[0])
            cache.restore(saved)
        runs[name] = synced(run, device)
    times = interleaved_medians(runs, repeats * 20, warmup=3)  # a step of about 2 ms: many samples, little time
    per_token = {name: c.kv_bytes() // (B * T) for name, c in caches.items()}  # per token of one sequence
    extra = {name: c.extra_state_bytes() // B for name, c in caches.items()}  # per sequence
    return times, per_token, extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--batch", type=positive_int, default=4)
    parser.add_argument("--heads", type=positive_int, default=8)
    parser.add_argument("--length", type=positive_int, default=1024)
    parser.add_argument("--head-dim", type=positive_int, default=64)
    parser.add_argument("--gamma", type=float, default=0.8)
    parser.add_argument("--repeats", type=positive_int, default=15)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="glibc's malloc keeps freed memory, as jemalloc and tcmalloc do (CPU)")
    parser.add_argument("--decode-only", action="store_true",
                        help="time the decode step alone, in a process that has run nothing else before it")
    args = parse_with_threads(parser)
    if args.keep_freed_memory:
        keep_freed_memory()
    B, H, T, D = args.batch, args.heads, args.length, args.head_dim
    device = checked_device(parser, args.device)

    rows = {} if args.decode_only else operator_benchmarks(B, H, T, D, args.gamma, args.repeats, device)
    if not args.decode_only:
        rows["layer forward+backward"] = layer_benchmark(B, H, T, D, args.gamma, args.repeats, device)
    decode, per_token, extra = decode_benchmark(B, H, T, D, args.gamma, args.repeats, device)
    rows["decode step (layer, symmetric)"] = decode

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    print(f"PSA (symmetric, gamma={args.gamma}) vs plain SDPA, B={B} H={H} T={T} D={D} fp32, "
          f"{args.threads} thread(s), torch {torch.__version__}, {where}"
          + (", freed memory kept" if args.keep_freed_memory else ""))
    print(f"{'':34s}{'SDPA ms':>10s}{'PSA ms':>10s}{'ratio':>8s}")
    for label, t in rows.items():
        print(f"{label:34s}{t['sdpa'] * 1e3:10.3f}{t['psa'] * 1e3:10.3f}{t['psa'] / t['sdpa']:8.3f}")
    print(f"cache bytes per token of a sequence per layer: SDPA {per_token['sdpa']}, PSA {per_token['psa']} "
          f"(extra: {per_token['psa'] - per_token['sdpa']}); PSA fixed extra state {extra['psa']} bytes "
          f"per sequence per layer, independent of T")
    if args.json:
        result = {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": platform.platform(), "device": where, "threads": args.threads, "shape": [B, H, T, D],
            "keep_freed_memory": args.keep_freed_memory, "decode_only": args.decode_only,
            "gamma": args.gamma, "torch": torch.__version__, "git": git_revision(),
            "ratios": {label: t["psa"] / t["sdpa"] for label, t in rows.items()},
            "ms": {label: {k: v * 1e3 for k, v in t.items()} for label, t in rows.items()},
            "cache_bytes_per_token": per_token, "extra_state_bytes": extra,
        }
        write_json(args.json, result)  # whole, its folder made


if __name__ == "__main__":
    main()
