"""The checks that need a GPU, as one script that finishes in under 10 minutes on one large GPU:

1. kernels: PSA (symmetric, gamma 0.8) against plain SDPA in bf16 at large shapes, forward and
   forward+backward, with each SDPA backend forced in turn (flash, memory-efficient), timed with
   CUDA events, interleaved; the ratio PSA / SDPA per backend;
2. the paper-scale phase transition: the 91.3M-parameter preset (psa-92m) on full-sequence
   induction, symmetric gamma = 0.8 against gamma = 0, a few seeds, bf16 autocast, stopping at
   emergence or at a step cap; emergence steps per seed.

Results go to OUT/gpu_check.json and are printed. ``--smoke`` runs tiny shapes on the CPU (to test
the script itself).

    python benchmarks/gpu_check.py --out results/ [--seeds 3 --max-steps 1500] [--smoke]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from psattn.experiments.configs import small_config
from psattn.ops import psa_attention
from psattn.training.trainer import train


def _timer(device: torch.device):
    if device.type == "cuda":
        def measure(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3
    else:
        def measure(fn):
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
    return measure


def kernel_ratios(device: torch.device, shape: tuple[int, int, int, int], dtype: torch.dtype, repeats: int) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, H, T, D = shape
    q, k, v = (torch.randn(B, H, T, D, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(B, H, T, D, device=device, dtype=dtype)
    measure = _timer(device)
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION} \
        if device.type == "cuda" else {"math": SDPBackend.MATH}
    fns = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "psa": lambda: psa_attention(q, k, v, gamma_q=0.8, gamma_k=0.8, is_causal=True),
    }
    results = {}
    for backend_name, backend in backends.items():
        with sdpa_kernel([backend]):
            for label, make in (("forward", lambda f: lambda: f()), ("forward+backward", lambda f: lambda: f().backward(grad))):
                runs = {name: make(fn) for name, fn in fns.items()}
                for run in runs.values():  # warm-up
                    run()
                times = {name: [] for name in runs}
                for _ in range(repeats):
                    for name, run in runs.items():
                        times[name].append(measure(run))
                med = {name: statistics.median(t) for name, t in times.items()}
                results[f"{backend_name} {label}"] = {"sdpa_ms": med["sdpa"] * 1e3, "psa_ms": med["psa"] * 1e3,
                                                      "ratio": med["psa"] / med["sdpa"]}
    return results


def phase_transition(device: str, seeds: int, max_steps: int, smoke: bool) -> dict:
    rows = []
    for gamma in (0.8, 0.0):
        for seed in range(seeds):
            model = {"d_model": 32, "n_heads": 2} if smoke else {"model_preset": "psa-92m"}
            config = small_config("symmetric", gamma, seed=seed, steps=max_steps, early_stop=True,
                                  device=device, **model)
            config = dataclasses.replace(config, train=dataclasses.replace(
                config.train, precision="fp32" if smoke else "bf16", threads=None, lr=3e-4 if not smoke else 3e-3,
                eval_every=10 if smoke else 50))
            start = time.perf_counter()
            result = train(config)
            rows.append({"gamma": gamma, "seed": seed, "emergence_step": result.emergence_step,
                         "best_accuracy": result.best_accuracy, "steps": result.steps,
                         "seconds": time.perf_counter() - start})
            print(f"  gamma {gamma}: seed {seed}: emergence step {result.emergence_step}, "
                  f"best acc {result.best_accuracy:.3f}, {result.steps} steps", flush=True)
    return {"runs": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=1500)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    args = parser.parse_args()
    device = torch.device("cpu" if args.smoke or not torch.cuda.is_available() else "cuda")
    info = {"torch": torch.__version__, "machine": platform.platform(),
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}
    print(info, flush=True)
    shape = (2, 2, 64, 16) if args.smoke else (8, 16, 4096, 128)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    result = {"info": info, "kernels": {"shape": shape, "dtype": str(dtype),
                                        **kernel_ratios(device, shape, dtype, 3 if args.smoke else args.repeats)}}
    for name, r in result["kernels"].items():
        if isinstance(r, dict):
            print(f"{name:28s} SDPA {r['sdpa_ms']:9.3f} ms  PSA {r['psa_ms']:9.3f} ms  ratio {r['ratio']:.3f}", flush=True)
    print("phase transition (psa-92m, full-sequence induction):", flush=True)
    result["phase_transition"] = phase_transition(device.type, 1 if args.smoke else args.seeds,
                                                  20 if args.smoke else args.max_steps, args.smoke)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2))
    print(f"wrote {out / 'gpu_check.json'}")


if __name__ == "__main__":
    main()
