"""The checks that need a GPU, as one script with a wall-clock budget (default 7 minutes):

1. commands: every task trained a few steps on the device, a sweep, eval, generate, export, footprint
   and the transformers integration there (``gpu_commands.py``; a command whose extra is missing on
   the machine is recorded as skipped);
2. fused_correctness: the fused kernel against the fp64 reference on the device, forward and the
   gradients, for every switch it has (the checks tests/ops/test_fused_attention.py runs in the
   interpreter);
3. fused_kernel: the fused Triton kernel beside SDPA's flash backend and the shear-then-SDPA path
   at T = 1k, 4k, 16k and D = 64, 128, forward and forward+backward, with each one's bf16 error
   against fp64; the kernel at gamma = 0 (its loop without the shear) and with its score product in
   fp16 (``fused_attention.score_products``) beside them; and at T = 4k,
   D = 128 the device time of every kernel each path launches (torch.profiler). With ``--backward-variants``,
   forward+backward also with each of the backward's variants (``fused_attention.backward_variant``) beside
   the default, each with the largest gap of its gradients to the default's (not in ``SECTION_S``'s estimate);
4. rope_shear: what a layer does before attention, then SDPA: RoPE alone, RoPE and the shear as
   separate eager passes, and ``rope_shear`` (one compiled pass), forward and forward+backward;
5. model_step: a psa-92m training step with the shear against the same model plain, eager and
   compiled, each with the device time of its most costly kernels (torch.profiler);
6. host_overhead: what PSA adds to a training step and a cached decode step bound by the host
   (``step_overhead.py`` on the device: psa-4m and psa-92m at 4 channels a head, operations and
   milliseconds per step against plain attention);
7. equivalence on the device, as largest absolute differences: under each forced SDPA backend, PSA
   (gamma 0.8) against an fp64 reference beside plain SDPA against fp64 plain attention (the
   kernel's own error, the yardstick), and cached decoding against the full forward (fp32 and bf16
   autocast);
8. kernels: PSA (symmetric, gamma 0.8) against plain SDPA in bf16 at large shapes, forward and
   forward+backward, with each SDPA backend forced in turn (flash, memory-efficient), timed with
   CUDA events, interleaved; the ratio PSA / SDPA per backend;
9. compile: the psa-4m preset trained in bf16 eagerly, under ``train.compile`` and (CUDA) under its CUDA
   graphs (``train.compile=reduce-overhead``) and compiled with the scored positions' logits alone (as on
   a CPU; a compiled step on a GPU computes every position's), same seed: the loss histories side by side and the
   step-time ratios over eager after warm-up; and where an eager step's time goes, for it and for the
   paper-scale sweep's psa-92m step (also with RoPE and the shear as eager operations, not one compiled
   call): its kernels' device time against its wall time, and each line that waits for the device, per step;
10. phase_transition: the psa-92m preset on full-sequence induction, symmetric gamma = 0.8 against
   gamma = 0, seeds interleaved, bf16 autocast, each run stopping at emergence, at a step cap or at
   its share of the remaining budget; emergence steps per seed.

OUT/gpu_check.json is rewritten after every section and every run (and compile's settings and
profiles as they come, marked "unfinished" until it returns), so a run cut short still leaves what it
measured; a section that fails is recorded under "errors" and the next one runs. On
a GPU, a section that would not end inside what is left of the budget, by the time it took on an
H200 (``SECTION_S``), is skipped and recorded under "skipped", so a shell's ``timeout`` set to the
budget never cuts one off halfway (on the CPU, the fused kernel's sections are skipped where
Triton's interpreter cannot run with the installed NumPy). ``--only`` runs the sections it names and keeps the rest of a
report already saved in OUT, so pieces run one after another add up (``section_info`` names the
run, date and git revision, that measured each section); a device machine empties OUT before each
call, so a piece run in a later call names the earlier piece's saved check with ``--add-to SAVED``.
``--smoke`` runs tiny shapes on the CPU (to test the script itself).

    python benchmarks/gpu_check.py --out results/ [--budget-s 480 --seeds 3 --max-steps 3000] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

from psattn.experiments.configs import small_config
from psattn.experiments.studies.paper_scale import PLANS, scale_config
from psattn.models import AttentionConfig, DecoderLM, preset
from psattn.ops import psa_attention, psa_attention_reference
from psattn.provenance import git_revision
from psattn.timing import interleaved_medians
from psattn.training.trainer import train

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_commands.py beside this file
from gpu_commands import command_smoke  # noqa: E402
from step_overhead import measure as step_overhead  # noqa: E402


class Report:
    """The results so far, rewritten atomically to ``path`` on every :meth:`save`.

    With ``rerun`` (the sections an ``--only`` run measures), a report already saved at ``path`` (or at
    ``add_to``: a piece run in an earlier device call, whose OUT the next call no longer has) is
    kept, less what it holds of those sections, so two ``--only`` runs into one folder add up;
    ``section_info`` names the run (date, git, device) each section came from."""

    def __init__(self, path: Path, info: dict, rerun: list[str] | None = None, add_to: Path | None = None):
        self.path, self.data = path, {"info": info}
        path.parent.mkdir(parents=True, exist_ok=True)
        source = path if add_to is None else add_to  # a check an earlier call saved (its OUT is gone)
        if rerun is not None and source.exists():
            try:
                saved = json.loads(source.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as err:  # nothing is run, nothing overwritten
                raise SystemExit(f"gpu_check.py: {source} is not a saved check ({err}); move it away or choose "
                                 "another --out") from None
            owners = saved.pop("section_info", {})
            old_info = saved.pop("info", {})
            saved.pop("seconds", None)  # the earlier run's length; this run writes its own
            for name in SECTION_S:
                if name in rerun:
                    saved.pop(name, None)
                    for part in ("errors", "skipped", "section_seconds"):
                        saved.get(part, {}).pop(name, None)
                        if part in saved and not saved[part]:
                            del saved[part]
                elif name in saved or name in saved.get("errors", {}) or name in saved.get("skipped", {}):
                    owners.setdefault(name, old_info)
            self.data |= saved
            self.data["section_info"] = {name: owner for name, owner in owners.items() if name not in rerun}

    def ran(self, name: str) -> None:
        """Record that section ``name`` was measured by this run."""
        self.data.setdefault("section_info", {})[name] = self.data["info"]

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2))
        os.replace(tmp, self.path)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


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


def _backends(device: torch.device) -> dict:
    from torch.nn.attention import SDPBackend

    if device.type == "cuda":
        return {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
    return {"math": SDPBackend.MATH}


def equivalence(device: torch.device, smoke: bool) -> dict:
    """Largest absolute differences of the equivalences the tests assert on the CPU."""
    from torch.nn.attention import sdpa_kernel

    g = torch.Generator(device="cpu").manual_seed(0)
    B, H, T, D = (2, 2, 32, 16) if smoke else (4, 8, 1024, 64)
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v = (torch.randn(B, H, T, D, generator=g).to(device, dtype) for _ in range(3))
        for name, backend in _backends(device).items():
            if dtype == torch.float32 and name == "flash":
                continue  # the flash kernel takes half precision only
            with sdpa_kernel([backend]):
                plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                fast = psa_attention(q, k, v, gamma_q=0.8, gamma_k=0.8, is_causal=True)
            reference = psa_attention_reference(q.double(), k.double(), v.double(), gamma_q=0.8, gamma_k=0.8,
                                                is_causal=True)
            plain_reference = psa_attention_reference(q.double(), k.double(), v.double(), is_causal=True)
            key = f"{name} {str(dtype).removeprefix('torch.')}"
            # the kernel's own error at gamma 0 is the yardstick for PSA's error at gamma 0.8
            out[f"{key}: SDPA vs fp64 plain attention"] = (plain.double() - plain_reference).abs().max().item()
            out[f"{key}: fast PSA vs fp64 reference"] = (fast.double() - reference).abs().max().item()
    config = preset("psa-4m", vocab_size=256, attention=AttentionConfig("symmetric", 0.8))
    torch.manual_seed(0)
    model = DecoderLM(config).to(device).eval()
    x = torch.randint(0, 256, (2, 16 if smoke else 128), generator=g).to(device)
    for precision in ("fp32", "bf16"):
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            full = model(x).float()
            cache = model.new_cache()
            steps = torch.cat([model(x[:, t : t + 1], cache=cache).float() for t in range(x.shape[1])], dim=1)
        out[f"psa-4m {precision}: cached decoding vs full forward (logits)"] = (steps - full).abs().max().item()
        out[f"psa-4m {precision}: greedy tokens agree"] = float((steps.argmax(-1) == full.argmax(-1)).float().mean())
    return out


def kernel_ratios(device: torch.device, shape: tuple[int, int, int, int], dtype: torch.dtype, repeats: int) -> dict:
    from torch.nn.attention import sdpa_kernel

    B, H, T, D = shape
    q, k, v = (torch.randn(B, H, T, D, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(B, H, T, D, device=device, dtype=dtype)
    measure = _timer(device)
    fns = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "psa": lambda: psa_attention(q, k, v, gamma_q=0.8, gamma_k=0.8, is_causal=True),
    }
    results = {"shape": list(shape), "dtype": str(dtype)}
    for backend_name, backend in _backends(device).items():
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


def _interleaved_ms(runs: dict, measure, repeats: int, warmup: int) -> dict[str, float]:
    """Median milliseconds of each run, interleaved (the warm-up rounds also compile and autotune)."""
    return {name: t * 1e3 for name, t in interleaved_medians(runs, repeats, warmup, measure).items()}


def _psa(backend: str, gamma: float = 0.8):
    return lambda q, k, v: psa_attention(q, k, v, gamma_q=gamma, gamma_k=gamma, is_causal=True, backend=backend)


def _psa_fused_fp16_scores(gamma: float = 0.8):
    """The fused kernel with its score product in fp16 (``fused_attention.score_products``)."""
    from psattn.ops.fused_attention import score_products

    def attention(q, k, v):
        with score_products(torch.float16):
            return _psa("fused", gamma)(q, k, v)
    return attention


#: the backward's variants ``fused_kernel`` times beside the default (``fused_attention.backward_variant``)
BACKWARD_VARIANTS = {"fused_presheared": dict(presheared=True), "fused_atomic_dq": dict(atomic_dq=True),
                     "fused_presheared_atomic_dq": dict(presheared=True, atomic_dq=True)}


def _fused_backward_variant(variant: dict, q, k, v, grad):
    """Forward and backward of the fused kernel (gamma 0.8), the backward run as ``backward_variant(**variant)``."""
    from psattn.ops.fused_attention import backward_variant

    def run():
        out = _psa("fused")(q, k, v)
        with backward_variant(**variant):
            out.backward(grad)
    return run


def _gradient_gaps(q, k, v, grad) -> dict[str, float]:
    """Largest absolute difference of each backward variant's gradients of q, k and v from the default's."""
    def grads(run) -> list:
        for x in (q, k, v):
            x.grad = None
        run()
        return [x.grad.clone() for x in (q, k, v)]

    default = grads(lambda: _psa("fused")(q, k, v).backward(grad))
    gaps = {name: max((got.float() - want.float()).abs().max().item() for got, want in
                      zip(grads(_fused_backward_variant(variant, q, k, v, grad)), default, strict=True))
            for name, variant in BACKWARD_VARIANTS.items()}
    for x in (q, k, v):
        x.grad = None
    return gaps


def _kernel_times(fn, device: torch.device, steps: int = 5) -> dict[str, float]:
    """Milliseconds per call of each kernel ``fn`` launches (device time; CPU time on the CPU), by
    torch.profiler over ``steps`` calls after one warm-up, largest first."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    activities = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        for _ in range(steps):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    attr = "device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    rows = {e.key: getattr(e, attr) / 1e3 / steps for e in prof.key_averages() if getattr(e, attr) > 0}
    return dict(sorted(rows.items(), key=lambda kv: -kv[1])[:12])


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


def fused_correctness(device: torch.device, smoke: bool) -> dict:
    """The fused kernel's fp64-reference checks of the test suite (tests/ops/test_fused_attention.py), run
    compiled on the device: fp32 inputs, every switch the kernel has (each variant's shear, GQA, sequence
    starts under both boundary rules, prev rows, no mask, odd lengths), forward and the gradients of
    every input, as the largest error relative to the reference's largest entry (absolute where that is 0). One bf16 case runs
    with the autotuned tiles; the rest with fixed 32 x 32 tiles (one compilation per switch set). The
    reference is fed the very inputs the kernel gets (rounded to its dtype), in fp64."""
    from psattn.ops import fused_attention
    from psattn.ops.variants import variant_gammas

    def case(B=2, Hq=4, Hkv=2, T=300, D=64, variant="symmetric", gamma=0.8, causal=True, starts=None,
             boundary="replicate", prev=False, dtype=torch.float32):
        g = torch.Generator().manual_seed(T + D)
        q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for H in (Hq, Hkv, Hkv))
        extra = {"prev_q": torch.randn(B, Hq, 1, D, generator=g, dtype=torch.float64),
                 "prev_k": torch.randn(B, Hkv, 1, D, generator=g, dtype=torch.float64)} if prev else {}
        upstream = torch.randn(B, Hq, T, D, generator=g, dtype=torch.float64)
        gamma_q, gamma_k = variant_gammas(variant, gamma)
        kwargs = dict(gamma_q=gamma_q, gamma_k=gamma_k, is_causal=causal, boundary=boundary)
        # both sides start from the inputs rounded to the kernel's dtype: the error is then the kernel's,
        # not the bf16 rounding of its inputs (about 1.1e-2 of the 1.7e-2 the reference fed unrounded saw)
        leaves = {n: x.to(dtype).double() for n, x in {"q": q, "k": k, "v": v, **extra}.items()}
        upstream = upstream.to(dtype).double()
        results = {}
        for backend, dev, dt in (("reference", "cpu", torch.float64), ("fused", device, dtype)):
            xs = {n: x.to(dev, dt).requires_grad_() for n, x in leaves.items()}
            st = None if starts is None else starts.to(dev)
            out = psa_attention(xs["q"], xs["k"], xs["v"], starts=st, backend=backend, **kwargs,
                                **{n: xs[n] for n in extra})
            grads = torch.autograd.grad(out, list(xs.values()), upstream.to(dev, dt))
            results[backend] = [out.detach(), *grads]
        names = ["out", *(f"d{n}" for n in leaves)]
        # a gradient that vanishes exactly (one visible key: the softmax ignores its query) is scored absolutely
        return {name: ((got.double().cpu() - ref).abs().max() / max(ref.abs().max().item(), 1e-30)).item()
                if ref.abs().max() > 0 else (got.double().cpu() - ref).abs().max().item()
                for name, ref, got in zip(names, results["reference"], results["fused"], strict=True)}

    T = 37 if smoke else 300
    starts = torch.zeros(2, T, dtype=torch.bool)
    starts[0, [5, T // 2]] = True
    starts[1, 32] = True  # on a tile's first row
    cases = {f"variant {name}": dict(variant=name, T=T) for name in ("symmetric", "key_only", "query_only")}
    cases.update({
        "starts, replicate, prev rows": dict(T=T, starts=starts, prev=True, gamma=1.2),
        "starts, zero boundary": dict(T=T, starts=starts, boundary="zero"),
        "no mask, D 32, odd length": dict(T=77, D=32, causal=False, Hq=3, Hkv=1),
        "D 128, MQA, length 1": dict(T=1, D=128, Hq=4, Hkv=1),
        "gamma 0": dict(T=T, gamma=0.0),
    })
    if smoke:  # Triton's interpreter runs each tile in Python: the same switches on two query heads sharing one key head
        cases = {name: {"Hq": 2, "Hkv": 1, **kwargs, **({"T": T} if kwargs["T"] > T else {})} for name, kwargs in cases.items()}
    out = {}
    with fused_attention.fixed_tiles(16 if device.type == "cpu" else 32):
        for name, kwargs in cases.items():
            out[name] = case(**kwargs)
    if device.type == "cuda":  # the tuned tiles, in bf16: errors of bf16 size, not of wrong rows
        out["bf16, autotuned tiles"] = case(T=1000, dtype=torch.bfloat16)
        with fused_attention.score_products(torch.float16):
            out["bf16, autotuned tiles, fp16 score product"] = case(T=1000, dtype=torch.bfloat16)
    return out


def fused_kernel(device: torch.device, smoke: bool, repeats: int, backward_variants: bool = False) -> dict:
    """The fused PSA kernel beside SDPA's flash backend and beside today's shear-then-SDPA, forward and
    forward+backward, at T = 1k, 4k, 16k and D = 64, 128 (bf16; fp32 on the CPU), interleaved; then
    each one's error against the fp64 reference on the last 4,096 queries of one head of the same
    inputs (every shape draws its own). ``backward_variants``: forward+backward also with each of
    ``BACKWARD_VARIANTS``, interleaved with the rest."""
    from torch.nn.attention import sdpa_kernel

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    flash = _backends(device)["flash" if device.type == "cuda" else "math"]
    shapes = [(1, 1, 33, 16)] if smoke else [  # one head in the interpreter, which runs each tile in Python
        (B, 16, T, D) for T, B in ((1024, 32), (4096, 8), (16384, 2)) for D in (64, 128)]
    measure = _timer(device)
    rows = {}
    for B, H, T, D in shapes:
        g = torch.Generator(device="cpu").manual_seed(T * 1000 + D)  # each shape its own inputs
        q, k, v = (torch.randn(B, H, T, D, generator=g).to(device, dtype).requires_grad_() for _ in range(3))
        grad = torch.randn(B, H, T, D, generator=g).to(device, dtype)
        fns = {"sdpa": _sdpa, "psa_sdpa": _psa("sdpa"), "psa_fused": _psa("fused"), "fused_gamma0": _psa("fused", 0.0),
               "psa_fused_fp16_scores": _psa_fused_fp16_scores()}
        row: dict = {"shape": [B, H, T, D], "dtype": str(dtype)}

        def forward(f, q=q, k=k, v=v):
            return lambda: f(q, k, v)

        def forward_backward(f, q=q, k=k, v=v, grad=grad):
            return lambda: f(q, k, v).backward(grad)

        variants = {name: _fused_backward_variant(variant, q, k, v, grad)
                    for name, variant in BACKWARD_VARIANTS.items()} if backward_variants else {}
        with sdpa_kernel([flash]):
            for label, make in (("forward", forward), ("forward+backward", forward_backward)):
                runs = {name: make(fn) for name, fn in fns.items()}
                if label == "forward+backward":  # the backward's variants: their forward is the default's
                    runs |= variants
                med = _interleaved_ms(runs, measure, repeats, warmup=1)
                row[label] = {**{f"{name}_ms": value for name, value in med.items()},
                              "fused_over_sdpa": med["psa_fused"] / med["sdpa"],
                              "shear_then_sdpa_over_sdpa": med["psa_sdpa"] / med["sdpa"],
                              "fused_gamma0_over_sdpa": med["fused_gamma0"] / med["sdpa"],
                              "fused_fp16_scores_over_sdpa": med["psa_fused_fp16_scores"] / med["sdpa"]}
                if label == "forward+backward":
                    row[label] |= {f"{name}_over_sdpa": med[name] / med["sdpa"] for name in variants}
                    row[label] |= {f"{name}_over_fused": med[name] / med["psa_fused"] for name in variants}
            row["error_vs_fp64"] = _errors(q, k, v, fns)
            row["error_rows"] = [max(T - 4096, 0), T]  # the queries the errors were taken on
            if variants:
                row["backward_variant_gradient_gap"] = _gradient_gaps(q, k, v, grad)
            if (T, D) == (4096, 128) or smoke:  # where the time goes: device time per kernel, fused against SDPA
                row["profile_forward_backward"] = {name: _kernel_times(forward_backward(fns[name]), device)
                                                   for name in ("sdpa", "psa_sdpa", "psa_fused")}
                row["profile_forward_backward"] |= {name: _kernel_times(run, device) for name, run in variants.items()}
        rows[f"T={T} D={D}"] = row
        print(f"  T={T:6d} D={D:3d}  fused/SDPA forward {row['forward']['fused_over_sdpa']:.3f}, forward+backward "
              f"{row['forward+backward']['fused_over_sdpa']:.3f}; errors {row['error_vs_fp64']}"
              + "".join(f"; {name} / fused, forward+backward {row['forward+backward'][name + '_over_fused']:.3f}, "
                        f"gradient gap {row['backward_variant_gradient_gap'][name]:.1e}" for name in variants), flush=True)
        del q, k, v, grad
    return rows


def rope_shear_step(device: torch.device, smoke: bool, repeats: int) -> dict:
    """What the layer does before attention, then SDPA, forward and forward+backward: RoPE alone (plain
    attention), RoPE then the shear as separate eager passes, and ``rope_shear`` (one compiled pass on
    CUDA, as the layers run it); each rotates and shears in fp32 and rounds once to bf16, as the layers
    do, so the three differ in their passes alone; symmetric gamma 0.8, interleaved; the two PSA paths'
    bf16 error against fp64."""
    shapes = [(1, 2, 33, 16)] if smoke else [(32, 16, 1024, 64), (8, 16, 4096, 128)]
    rows = {}
    for shape in shapes:
        row = _rope_shear_row(device, shape, repeats)
        B, H, T, D = shape
        rows[f"T={T} D={D}"] = row
        print(f"  T={T:6d} D={D:3d}  over RoPE+SDPA: separate passes forward {row['forward']['separate_over_plain']:.3f}, "
              f"fwd+bwd {row['forward+backward']['separate_over_plain']:.3f}; rope_shear forward "
              f"{row['forward']['rope_shear_over_plain']:.3f}, fwd+bwd {row['forward+backward']['rope_shear_over_plain']:.3f}",
              flush=True)
    return rows


def _rope_shear_row(device: torch.device, shape: tuple[int, int, int, int], repeats: int) -> dict:
    from psattn.ops import RotaryEmbedding, apply_rope, shear
    from psattn.ops.rope_shear import rope_shear, wide_dtype

    B, H, T, D = shape
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, generator=g).to(device, dtype).requires_grad_() for _ in range(3))
    grad = torch.randn(B, H, T, D, generator=g).to(device, dtype)
    cos32, sin32 = RotaryEmbedding(D).to(device)(torch.arange(T, device=device)[None])  # (1, 1, T, D), float32
    # each path rotates (and shears) a 16-bit stream in float32 with float32 tables, as a layer does, and
    # rounds once; the paths differ in their passes alone

    def rotated(x, cos, sin):
        wide = wide_dtype(x.dtype)
        return apply_rope(x.to(wide), cos.to(wide), sin.to(wide)).to(x.dtype)

    def plain(q, k, v, cos=cos32, sin=sin32):  # a plain layer: RoPE alone
        return _sdpa(rotated(q, cos, sin), rotated(k, cos, sin), v)

    def sheared(x, cos, sin):  # the eager operations, one after the other
        return shear(rotated(x.to(wide_dtype(x.dtype)), cos, sin), 0.8).to(x.dtype)

    def separate(q, k, v, cos=cos32, sin=sin32):
        return _sdpa(sheared(q, cos, sin), sheared(k, cos, sin), v)

    compiled = device.type == "cuda"  # compiled on the GPU at every size (the error rows' slice is small)

    def fused(q, k, v, cos=cos32, sin=sin32):
        return _sdpa(rope_shear(q, cos, sin, 0.8, fused=compiled), rope_shear(k, cos, sin, 0.8, fused=compiled), v)

    fns = {"plain": plain, "separate": separate, "rope_shear": fused}
    row: dict = {"shape": list(shape), "dtype": str(dtype), "compiled": device.type == "cuda"}
    for label, make in (("forward", lambda f: lambda: f(q, k, v)),
                        ("forward+backward", lambda f: lambda: f(q, k, v).backward(grad))):
        med = _interleaved_ms({name: make(fn) for name, fn in fns.items()}, _timer(device), repeats, warmup=2)
        row[label] = {**{f"{name}_ms": value for name, value in med.items()},
                      "separate_over_plain": med["separate"] / med["plain"],
                      "rope_shear_over_plain": med["rope_shear"] / med["plain"]}
    T1 = min(T, 2048)  # the error on the first sequence and head
    q1, k1, v1 = (x[:1, :1, :T1].detach() for x in (q, k, v))
    c1, s1 = cos32[..., :T1, :], sin32[..., :T1, :]
    exact = separate(q1.double(), k1.double(), v1.double(), c1.double(), s1.double())
    with torch.no_grad():
        row["error_vs_fp64"] = {name: (fns[name](q1, k1, v1, c1, s1).double() - exact).abs().max().item()
                                for name in ("separate", "rope_shear")}
    return row


def _errors(q, k, v, fns, rows: int = 4096) -> dict:
    """Largest absolute error against fp64 on the last ``rows`` queries (those that attend to the most
    keys) of the first head of the first sequence: each PSA path against the PSA reference, the others
    (SDPA, the kernel at gamma 0) against plain attention. The reference, in fp64, is fed the very
    (rounded) inputs the paths get."""
    q1, k1, v1 = (x[:1, :1].detach() for x in (q, k, v))  # (1, 1, T, D)
    last = slice(max(q1.shape[2] - rows, 0), None)
    with torch.no_grad():
        exact = {psa: psa_attention_reference(q1.double(), k1.double(), v1.double(), is_causal=True,
                                              **({"gamma_q": 0.8, "gamma_k": 0.8} if psa else {}))[:, :, last]
                 for psa in (True, False)}
        return {name: (fn(q1, k1, v1)[:, :, last].double() - exact[name.startswith("psa_")]).abs().max().item()
                for name, fn in fns.items()}


def model_step(device: torch.device, smoke: bool, repeats: int) -> dict:
    """One training step (forward, backward, AdamW) of the psa-92m preset with the symmetric shear
    against the same model plain, bf16 autocast, eager and compiled, interleaved; eagerly on CUDA also
    PSA on the fused kernel (``backend="fused"``)."""
    B, T = (2, 32) if smoke else (8, 1024)
    out = {}
    for mode in ("eager",) if smoke else ("eager", "compiled"):  # compiling on the CPU takes minutes
        steps = {}
        models = [("plain", AttentionConfig("baseline"), "auto"), ("psa", AttentionConfig("symmetric", 0.8), "auto")]
        if mode == "eager" and device.type == "cuda":  # the fused kernel refuses torch.compile's tracing
            models.append(("psa_fused", AttentionConfig("symmetric", 0.8), "fused"))
        for name, attention, backend in models:
            torch.manual_seed(0)
            config = preset("psa-4m" if smoke else "psa-92m", vocab_size=256, attention=attention)
            model = DecoderLM(config, backend=backend).to(device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
            forward = torch.compile(model) if mode == "compiled" else model
            ids = torch.randint(0, 256, (B, T + 1), device=device)

            def step(forward=forward, opt=opt, ids=ids):
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                    logits = forward(ids[:, :-1])
                    loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            steps[name] = step
        med = _interleaved_ms(steps, _timer(device), repeats, warmup=3)  # warm-up: compilation too
        out[mode] = {"plain_ms": med["plain"], "psa_ms": med["psa"], "ratio": med["psa"] / med["plain"],
                     "profile": {name: _kernel_times(step, device, steps=2) for name, step in steps.items()}}
        fused = ""
        if "psa_fused" in med:
            out[mode] |= {"psa_fused_ms": med["psa_fused"], "fused_ratio": med["psa_fused"] / med["plain"]}
            fused = f", PSA on the fused kernel {med['psa_fused']:.2f} ms, ratio {out[mode]['fused_ratio']:.3f}"
        print(f"  {mode:9s} step plain {med['plain']:.2f} ms, PSA {med['psa']:.2f} ms, ratio {out[mode]['ratio']:.3f}"
              f"{fused}", flush=True)
    out["preset"], out["batch"], out["length"] = "psa-4m" if smoke else "psa-92m", B, T
    out["precision"] = "bf16 autocast" if device.type == "cuda" else "fp32"
    return out


def _timed_train(config, time_limit_s: float | None = None) -> tuple[dict, list[float]]:
    stamps: list[float] = []
    start = time.perf_counter()
    result = train(config, on_step=lambda step, loss: stamps.append(time.perf_counter()), time_limit_s=time_limit_s)
    row = {"emergence_step": result.emergence_step, "best_accuracy": result.best_accuracy, "steps": result.steps,
           "timed_out": result.timed_out, "seconds": time.perf_counter() - start,
           "first_step_s": stamps[0] - start if stamps else None,  # includes building and compiling
           "train_loss": [h["train_loss"] for h in result.history if h["step"] > 0]}  # step 0: untrained
    return row, stamps


#: the trainer's settings the compile section trains under: eager, torch.compile's default mode, and its
#: CUDA graphs ("reduce-overhead", which replays a step's kernels instead of launching each from Python;
#: on a CPU it is the default mode again, and is left out there); then, on CUDA, the default mode computing
#: the scored positions alone, as a compiled step does on a CPU (``loss.EVERY_LOGIT_WHEN_COMPILED_ON_GPU``)
COMPILE_SETTINGS = {"eager": False, "compiled": True, "cuda_graphs": "reduce-overhead", "compiled_scored": True}
CUDA_SETTINGS = ("cuda_graphs", "compiled_scored")


def compile_check(device: str, smoke: bool, keep=None) -> dict:
    """psa-4m trained under each of ``COMPILE_SETTINGS`` from the same seed: loss histories and step times
    after warm-up, as ratios over eager; then where an eager step's time goes (``step_profile``). A
    setting that fails is recorded as its error, and the others still run. ``keep(rows)`` receives the rows
    so far after each setting and profile (the section's minutes: a run cut short keeps them)."""
    keep = keep or (lambda rows: None)
    steps = 20 if smoke else 300
    config = small_config("symmetric", 0.8, steps=steps, early_stop=False, device=device,
                          **({"d_model": 32, "n_heads": 2} if smoke else {"model_preset": "psa-4m"}))
    config = dataclasses.replace(config, train=dataclasses.replace(
        config.train, precision="fp32" if smoke else "bf16", threads=None, lr=1e-3, eval_every=steps // 4,
        **({"eval_size": 64} if smoke else {})))
    out: dict = {"batch": config.train.batch_size, "length": config.task.seq_len, "precision": config.train.precision}
    for mode, setting in COMPILE_SETTINGS.items():
        if mode in CUDA_SETTINGS and device != "cuda":
            continue
        run = dataclasses.replace(config, train=dataclasses.replace(config.train, compile=setting))
        try:
            with _every_logit(mode != "compiled_scored"):
                row, stamps = _timed_train(run)
        except Exception as e:  # noqa: BLE001  # e.g. a graph CUDA graphs refuse: the other settings' rows stay
            out[mode] = {"error": f"{type(e).__name__}: {e}"}
            print(f"  {mode:11s} failed: {out[mode]['error']}", flush=True)
            keep(out)
            continue
        later = stamps[steps // 2 :]  # after compilation and warm-up
        row["step_ms"] = 1e3 * statistics.median(b - a for a, b in itertools.pairwise(later))  # evaluations excluded
        out[mode] = row
        print(f"  {mode:11s} step {row['step_ms']:.2f} ms, losses {[round(x, 3) for x in row['train_loss']]}", flush=True)
        eager = out.get("eager", {})
        if mode != "eager" and "step_ms" in eager:  # the ratios with the row, so that a kept row has them
            suffix = "" if mode == "compiled" else f"_{mode}"
            out[f"step_time_ratio_{mode}_over_eager"] = row["step_ms"] / eager["step_ms"]
            out[f"largest_relative_loss_gap{suffix}"] = max(
                abs(a - b) / abs(b) for a, b in zip(row["train_loss"], eager["train_loss"], strict=True))
        keep(out)
    plan = PLANS["quick" if smoke else "full"]  # the paper-scale sweep's first run: how its steps are bound
    label, size = plan.sizes[0]
    scale = scale_config(plan, size, "all_positions", "symmetric", 0.8, seed=0)
    scale = dataclasses.replace(scale, train=dataclasses.replace(scale.train, device=device))
    # on CUDA, RoPE and the shear of a large stream run as one compiled call (psattn.ops.rope_shear): it saves
    # passes over memory and costs host time per call; the last profile has them as eager operations instead
    plain = scale_config(plan, size, "all_positions", "baseline", 0.0, seed=0)  # the same run, plain attention
    plain = dataclasses.replace(plain, train=dataclasses.replace(plain.train, device=device))
    profiles = [("eager_step_profile", config, None), ("paper_scale_step_profile", scale, None),
                ("paper_scale_step_profile_plain", plain, None)]
    if device == "cuda":
        profiles.append(("paper_scale_step_profile_rope_shear_eager", scale, 1 << 62))
    for key, run, compile_from in profiles:
        try:
            with _compile_rope_shear_from(compile_from):
                p = out[key] = step_profile(run, device, **({"warm": 2, "steps": 2} if smoke else {}))
            print(f"  {key}: {p['wall_ms']:.2f} ms wall ({p['wall_ms_unread']:.2f} reading nothing back), "
                  f"{p['kernel_ms']:.2f} ms of kernels"
                  + (f", waits for the device per step {p['syncs_per_step']}" if "syncs_per_step" in p else ""), flush=True)
        except Exception as e:  # noqa: BLE001  # the rows above stay
            out[key] = {"error": f"{type(e).__name__}: {e}"}
            print(f"  {key} failed: {out[key]['error']}", flush=True)
        if key.startswith("paper_scale"):
            out[key].update(preset=label, batch=scale.train.batch_size, length=scale.task.seq_len)
        keep(out)
    return out


@contextlib.contextmanager
def _every_logit(every: bool):
    """``psattn.training.loss.EVERY_LOGIT_WHEN_COMPILED_ON_GPU`` set to ``every`` inside."""
    from psattn.training import loss

    saved, loss.EVERY_LOGIT_WHEN_COMPILED_ON_GPU = loss.EVERY_LOGIT_WHEN_COMPILED_ON_GPU, every
    try:
        yield
    finally:
        loss.EVERY_LOGIT_WHEN_COMPILED_ON_GPU = saved


@contextlib.contextmanager
def _compile_rope_shear_from(elements: int | None):
    """``psattn.ops.rope_shear.COMPILE_FROM`` set to ``elements`` inside (None: as it is)."""
    from psattn.ops import rope_shear

    saved = rope_shear.COMPILE_FROM
    rope_shear.COMPILE_FROM = saved if elements is None else elements
    try:
        yield
    finally:
        rope_shear.COMPILE_FROM = saved


def step_profile(config, device: str, warm: int = 10, steps: int = 10) -> dict:
    """Where an eager training step's time goes, over ``steps`` steps after ``warm``, in separate runs of
    the same steps: the wall time per step, timed through ``on_step`` (which reads each step's loss, so
    every step waits for the device) and without it (``wall_ms_unread``: runs of ``warm`` and of
    ``warm + steps`` steps, their difference, in which the trainer reads nothing back between
    evaluations); the time of the kernels it runs under torch.profiler (device time on CUDA, the
    operators' own time on the CPU); and, on CUDA, each line that waits for the device
    (``torch.cuda.set_sync_debug_mode``) with its count per step, where the trainer's are the timing
    callback's own (its look at the loss, and ``loss.item()``, for ``on_step``). Kernel time far below
    wall time means the host's launches bound the step: what CUDA graphs remove."""
    import warnings

    from torch.profiler import ProfilerActivity, profile, schedule

    total = warm + steps
    run = dataclasses.replace(config, train=dataclasses.replace(
        config.train, steps=total, eval_every=total, early_stop=False, checkpoint_every=total, compile=False))
    cuda = device == "cuda"
    stamps: list[float] = []
    train(run, on_step=lambda step, loss: stamps.append(time.perf_counter()))
    out = {"steps": steps, "wall_ms": 1e3 * (stamps[-1] - stamps[warm - 1]) / steps}  # steps warm + 1..total
    seconds = {}
    for n in (warm, total):  # the same building and two evaluations, `steps` steps apart
        short = dataclasses.replace(run, train=dataclasses.replace(run.train, steps=n, eval_every=n, checkpoint_every=n))
        began = time.perf_counter()
        train(short)  # its last evaluation reads the device: the steps before it are done
        seconds[n] = time.perf_counter() - began
    out["wall_ms_unread"] = 1e3 * (seconds[total] - seconds[warm]) / steps
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    # regions between two prof.step() calls: train step j runs in region j - 1, so regions warm..total-1 are its
    # steps warm + 1..total, and the final evaluation (after the last call) is outside
    with profile(activities=activities, schedule=schedule(wait=warm - 1, warmup=1, active=steps, repeat=1)) as prof:
        train(run, on_step=lambda step, loss: prof.step())
    if cuda:  # the device's own events (kernels, copies), each once
        device_events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        kernel_us = sum(e.device_time_total for e in device_events)
        out["launches_per_step"] = len(device_events) / steps  # kernels, copies and fills the host launched
    else:  # every operator's time less its children's (a step's annotation holds the Python between them: left out)
        kernel_us = sum(e.self_cpu_time_total for e in prof.events() if not e.name.startswith("ProfilerStep"))
    out["kernel_ms"] = kernel_us / 1e3 / steps
    if cuda:
        def on_step(step, loss):
            torch.cuda.set_sync_debug_mode("warn" if warm <= step < total else 0)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                train(run, on_step=on_step)
            finally:
                torch.cuda.set_sync_debug_mode(0)
        sites: dict[str, int] = {}
        for w in caught:
            if "called a synchronizing" in str(w.message):  # not the mode's own "prototype feature" warning
                site = f"{Path(w.filename).name}:{w.lineno}"
                sites[site] = sites.get(site, 0) + 1
        out["syncs_per_step"] = {site: n / steps for site, n in sorted(sites.items(), key=lambda kv: -kv[1])}
    return out


def phase_transition_config(gamma: float, seed: int, max_steps: int, device: str, smoke: bool):
    """One run of the phase-transition section: the psa-92m preset at the induction task's vocabulary of 64
    (85,068,288 parameters, docs/scale-out.md), symmetric shear, bf16; with ``smoke`` a tiny model in fp32."""
    model = {"d_model": 32, "n_heads": 2} if smoke else {"model_preset": "psa-92m"}
    config = small_config("symmetric", gamma, seed=seed, steps=max_steps, early_stop=True, device=device, **model)
    return dataclasses.replace(config, train=dataclasses.replace(
        config.train, precision="fp32" if smoke else "bf16", threads=None, lr=3e-3 if smoke else 3e-4,
        eval_every=10 if smoke else 50))


def phase_transition(device: str, seeds: int, max_steps: int, deadline: float, smoke: bool, report: Report) -> None:
    plan = [(gamma, seed) for seed in range(seeds) for gamma in (0.8, 0.0)]  # interleaved: a cut keeps pairs
    rows = report.data["phase_transition"]["runs"]
    for i, (gamma, seed) in enumerate(plan):
        share = (deadline - time.perf_counter()) / (len(plan) - i)
        if share < 5:
            print(f"  budget spent; skipping the {len(plan) - i} remaining runs", flush=True)
            break
        config = phase_transition_config(gamma, seed, max_steps, device, smoke)
        if i == 0:
            report.data["phase_transition"]["parameters"] = DecoderLM(config.model).num_parameters()
        row, stamps = _timed_train(config, time_limit_s=share)
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        row.update(gamma=gamma, seed=seed,
                   step_ms=1e3 * statistics.median(gaps) if gaps else None,  # a step alone: evaluations left out
                   span_ms_per_step=1e3 * sum(gaps) / len(gaps) if gaps else None)  # evaluations in (as on 2026-12-04)
        del row["train_loss"]
        rows.append(row)
        report.save()
        print(f"  gamma {gamma}: seed {seed}: emergence step {row['emergence_step']}, best acc "
              f"{row['best_accuracy']:.3f}, {row['steps']} steps in {row['seconds']:.0f} s"
              f"{' (time share spent)' if row['timed_out'] else ''}", flush=True)


def host_overhead(device: torch.device, repeats: int) -> dict:
    """``benchmarks/step_overhead.py`` on the device: for psa-4m and psa-92m at 4 channels a head, a training
    step (fp32, bf16 autocast) and a cached decode step (fp32, bf16 weights), PSA against plain attention:
    the operations each dispatches and its milliseconds, each step waiting for the device."""
    return {"training": [step_overhead(name, bf16, repeats, device) for name in ("psa-4m", "psa-92m") for bf16 in (False, True)],
            "decode": [step_overhead(name, bf16, repeats, device, decode=True)
                       for name in ("psa-4m", "psa-92m") for bf16 in (False, True)]}


#: seconds each section took on an H200 (2026-12-04, with what was added since estimated), to skip a
#: section that would not end inside the budget; phase_transition stops its runs at the deadline itself
SECTION_S = {"commands": 150, "fused_correctness": 110, "fused_kernel": 110, "rope_shear": 45, "model_step": 150,
             "host_overhead": 60, "equivalence": 30, "kernels": 30, "compile": 225, "phase_transition": 0}


def skip_reason(name: str, left_s: float, device: torch.device) -> str | None:
    """Why section ``name`` is skipped with ``left_s`` seconds of the budget left (None: it runs). Only
    on a GPU: the estimates are an H200's, and the CPU's smoke runs are its own check. On the CPU the
    fused kernel's sections are skipped where Triton's interpreter cannot run with the installed NumPy."""
    if name.startswith("fused") and device.type != "cuda" and importlib.util.find_spec("triton") is not None:
        from psattn.ops.fused_attention import interpreter_unusable

        if (why := interpreter_unusable()) is not None:
            return why
    need = SECTION_S.get(name, 0)
    if device.type != "cuda" or need <= left_s:
        return None
    return f"it took about {need} s on an H200 and {max(left_s, 0):.0f} s of the budget were left"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    parser.add_argument("--out", default="gpu_check")
    parser.add_argument("--budget-s", type=float, default=420.0, help="wall-clock budget for the whole script")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--backward-variants", action="store_true",
                        help="fused_kernel also times the backward's variants (fused_attention.backward_variant)")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    parser.add_argument("--only", nargs="+", metavar="SECTION", help="run these sections alone (default: all, in order): "
                        + ", ".join(SECTION_S))
    parser.add_argument("--add-to", type=Path, metavar="SAVED", help="with --only: a gpu_check.json an earlier call "
                        "saved (copied into the checkout, which travels with the call; a device's OUT starts empty): "
                        "OUT's check is it with these sections added")
    args = parser.parse_args()
    names = list(SECTION_S)  # the sections, in the order they run
    unknown = set(args.only or ()) - set(names)
    if unknown:  # refused before the report is made: a saved gpu_check.json in --out stays as it was
        parser.error(f"unknown sections {sorted(unknown)}; the sections are {', '.join(names)}")
    for flag, value in (("--seeds", args.seeds), ("--max-steps", args.max_steps), ("--repeats", args.repeats)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, not {value}")
    if args.budget_s < 0:
        parser.error(f"--budget-s must be at least 0, not {args.budget_s:g}")
    if args.add_to is not None:
        if not args.only:
            parser.error("--add-to needs --only: the sections to add to the saved check")
        if not args.add_to.is_file():
            parser.error(f"--add-to {args.add_to}: no such file (a gpu_check.json an earlier call saved)")
        if (Path(args.out) / "gpu_check.json").exists():
            parser.error(f"--out {args.out} holds a saved check already: give --add-to or that folder, not both")
    deadline = time.perf_counter() + args.budget_s
    device = torch.device("cpu" if args.smoke or not torch.cuda.is_available() else "cuda")
    if device.type == "cpu":  # the fused kernel then runs in Triton's interpreter (set before it is built)
        os.environ.setdefault("TRITON_INTERPRET", "1")
    info = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git": git_revision(),
            "torch": torch.__version__, "triton": _version("triton"),
            "machine": platform.platform(),
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "budget_s": args.budget_s}
    print(info, flush=True)

    shape = (2, 2, 64, 16) if args.smoke else (8, 16, 4096, 128)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    sections = {
        "commands": lambda: command_smoke(device.type, Path(tempfile.mkdtemp(prefix="psattn-commands-"))),
        "fused_correctness": lambda: fused_correctness(device, args.smoke),
        "fused_kernel": lambda: fused_kernel(device, args.smoke, 1 if args.smoke else args.repeats, args.backward_variants),
        "rope_shear": lambda: rope_shear_step(device, args.smoke, 1 if args.smoke else args.repeats),
        "model_step": lambda: model_step(device, args.smoke, 2 if args.smoke else 10),
        "host_overhead": lambda: host_overhead(device, 2 if args.smoke else 100),
        "equivalence": lambda: equivalence(device, args.smoke),
        "kernels": lambda: kernel_ratios(device, shape, dtype, 3 if args.smoke else args.repeats),
        "compile": lambda: compile_check(device.type, args.smoke, keep=keep_rows("compile")),
        "phase_transition": lambda: phase_transition(
            device.type, 1 if args.smoke else args.seeds, 20 if args.smoke else args.max_steps, deadline,
            args.smoke, report),
    }
    report = Report(Path(args.out) / "gpu_check.json", info, rerun=args.only, add_to=args.add_to)

    def keep_rows(name: str):  # a long section's rows so far, saved as they come: a `timeout` that cuts it keeps them
        def keep(rows: dict) -> None:
            report.data[name] = {**rows, "unfinished": True}  # the section's return replaces it
            report.save()
        return keep

    if not args.only or "phase_transition" in args.only:
        report.data["phase_transition"] = {"max_steps": args.max_steps, "runs": []}
    report.save()
    for name, run in sections.items():
        if args.only and name not in args.only:
            continue
        print(f"{name}:", flush=True)
        report.ran(name)
        why = skip_reason(name, deadline - time.perf_counter(), device)
        if why is not None:
            report.data.setdefault("skipped", {})[name] = why
            print(f"  skipped: {why}", flush=True)
            report.save()
            continue
        began = time.perf_counter()
        try:  # a failing part is recorded and the next one still runs
            result = run()
        except Exception as err:
            report.data.setdefault("errors", {})[name] = f"{type(err).__name__}: {err}"
            print(f"  FAILED: {type(err).__name__}: {err}", flush=True)
        else:
            if result is not None:
                report.data[name] = result
                _print_section(name, result)
        report.data.setdefault("section_seconds", {})[name] = round(time.perf_counter() - began, 1)
        report.save()
    report.data["seconds"] = args.budget_s - (deadline - time.perf_counter())
    report.save()
    print(f"wrote {report.path}")


def _print_section(name: str, result: dict) -> None:
    if name == "commands":
        failed = [what for what, row in result.items() if row["status"] == "failed"]
        skipped = [what for what, row in result.items() if row["status"] == "skipped"]
        print(f"  {len(result) - len(failed) - len(skipped)} commands ok, skipped {skipped or 'none'}, "
              f"failed {failed or 'none'}", flush=True)
    elif name == "fused_correctness":
        for what, errors in result.items():
            worst = max(errors, key=errors.get)
            print(f"  {what:30s} largest relative error {errors[worst]:.2g} ({worst})", flush=True)
    elif name == "equivalence":
        for what, value in result.items():
            print(f"  {what:58s} {value:.3g}", flush=True)
    elif name == "host_overhead":
        for r in result["training"] + result["decode"]:
            print(f"  {r['preset']:8s} {r['step']:8s} {r['precision']:13s} PSA / plain {r['host_ratio']:.3f}, "
                  f"{r['extra_operations_per_layer']:g} operations a layer more", flush=True)
    elif name == "kernels":
        for what, r in result.items():
            if isinstance(r, dict):
                print(f"  {what:26s} SDPA {r['sdpa_ms']:9.3f} ms  PSA {r['psa_ms']:9.3f} ms  ratio {r['ratio']:.3f}",
                      flush=True)
    elif name == "compile":
        for mode in ("compiled", *CUDA_SETTINGS):
            if f"step_time_ratio_{mode}_over_eager" in result:
                gap = result["largest_relative_loss_gap" + ("" if mode == "compiled" else f"_{mode}")]
                print(f"  {mode}/eager step time {result[f'step_time_ratio_{mode}_over_eager']:.3f}, "
                      f"largest relative loss gap {gap:.3g}", flush=True)


if __name__ == "__main__":
    main()
