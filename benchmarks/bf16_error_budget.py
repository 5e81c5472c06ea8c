"""Where a bf16 attention kernel's error comes from, for plain attention and for PSA, worked out in fp64
on the CPU: no GPU needed, and every rounding is placed by hand.

A FlashAttention-style kernel (SDPA's flash backend, or psattn's fused kernel) takes bf16 q, k, v and
rounds in three places: the streams that enter the score product (q and k for plain attention, which
are bf16 already, so nothing is lost; the sheared q̂ = q + γ_q(q − q_prev) and k̂ for PSA, which are
not), the probabilities P before the P·V product, and the output. Each pipeline below rounds some of
these to bf16 or fp16 and computes everything else exactly; its largest absolute error against the
exact fp64 result, on the same rows and inputs ``gpu_check.py fused_kernel`` draws, says what that
rounding costs, and which error a kernel that rounds the same way cannot go below:

- ``sdpa``: plain attention, P and the output rounded to bf16 (what SDPA's flash kernel rounds);
- ``output_only``: plain attention with only the output rounded (the floor of any bf16 output);
- ``psa_bf16``: PSA with q̂, k̂, P and the output rounded to bf16 (the fused kernel and shear-then-SDPA);
- ``psa_fp16_streams``: as ``psa_bf16`` with q̂ and k̂ rounded to fp16 instead (same tensor-core speed,
  8× finer; a kernel scales each row by a power of two to stay inside fp16's range, as the fused
  kernel does under ``score_products``);
- ``psa_fp16_streams_p``: as ``psa_fp16_streams`` with P rounded to fp16 as well;
- ``psa_output_only``: PSA with only the output rounded.

The ``sdpa`` and ``psa_bf16`` rows can be set beside the errors the H200 measured (docs/kernel.md),
which tests the model of the rounding; the others say what a kernel that rounds differently would gain.
fp32 accumulation is left out (its error is about 2^-24 relative). Usage:

    python benchmarks/bf16_error_budget.py [--out FILE.json] [--rows 4096] [--smoke]
"""

from __future__ import annotations

import argparse
import math
import platform
from datetime import datetime, timezone

import torch

from psattn.files import write_json
from psattn.ops import shear
from psattn.provenance import git_revision

GAMMA = 0.8  # symmetric PSA, as gpu_check.py times it
PIPELINES = {  # name: (sheared, stream dtype, P dtype); the output is rounded to bf16 in every one
    "sdpa": (False, None, torch.bfloat16),
    "output_only": (False, None, None),
    "psa_bf16": (True, torch.bfloat16, torch.bfloat16),
    "psa_fp16_streams": (True, torch.float16, torch.bfloat16),
    "psa_fp16_streams_p": (True, torch.float16, torch.float16),
    "psa_output_only": (True, None, None),
}


def rounded(x: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``x`` rounded to ``dtype`` (to nearest, ties to even) and back to fp64; unchanged for None."""
    return x if dtype is None else x.to(dtype).double()


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: slice, p_dtype: torch.dtype | None,
              chunk: int = 1024) -> torch.Tensor:
    """Causal attention of the queries ``rows`` of q (T, D) over k, v (T, D) in fp64, with P rounded to
    ``p_dtype`` before the P·V product and the row sums taken from the unrounded P, as flash kernels do."""
    scale = q.shape[-1] ** -0.5
    out = []
    for start in range(rows.start, rows.stop, chunk):
        stop = min(start + chunk, rows.stop)
        s = q[start:stop] @ k[:stop].T * scale  # (chunk, stop)
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(start + 1), -math.inf)  # causal
        p = (s - s.amax(-1, keepdim=True)).exp()
        out.append(rounded(p, p_dtype) @ v[:stop] / p.sum(-1, keepdim=True))  # (chunk, D)
    return torch.cat(out)


def inputs(B: int, H: int, T: int, D: int) -> tuple[torch.Tensor, ...]:
    """The first head of the first sequence of the bf16 q, k, v that ``gpu_check.py fused_kernel`` draws
    for this shape, in fp64 (T, D) each."""
    g = torch.Generator().manual_seed(T * 1000 + D)
    return tuple(torch.randn(B, H, T, D, generator=g)[0, 0].to(torch.bfloat16).double() for _ in range(3))


def errors(B: int, H: int, T: int, D: int, rows: int) -> dict:
    """Each pipeline's largest absolute error on the first and on the last ``rows`` queries."""
    q, k, v = inputs(B, H, T, D)
    sheared = {False: (q, k), True: (shear(q[None, None], GAMMA)[0, 0], shear(k[None, None], GAMMA)[0, 0])}  # exact q̂, k̂
    result: dict = {}
    for window, span in (("first_rows", slice(0, min(rows, T))), ("last_rows", slice(max(T - rows, 0), T))):
        exact = {psa: attention(*sheared[psa], v, span, None) for psa in (False, True)}
        result[window] = {}
        for name, (psa, stream_dtype, p_dtype) in PIPELINES.items():
            qs, ks = (rounded(x, stream_dtype) for x in sheared[psa])
            out = rounded(attention(qs, ks, v, span, p_dtype), torch.bfloat16)
            result[window][name] = (out - exact[psa]).abs().max().item()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the results as JSON to this file")
    parser.add_argument("--rows", type=int, default=4096, help="queries per window (gpu_check.py's 4,096)")
    parser.add_argument("--smoke", action="store_true", help="one tiny shape (to test the script)")
    args = parser.parse_args()
    if args.rows < 1:
        parser.error(f"--rows must be at least 1, not {args.rows}")
    shapes = [(1, 2, 40, 16)] if args.smoke else [
        (B, 16, T, D) for T, B in ((1024, 32), (4096, 8), (16384, 2)) for D in (64, 128)]
    results = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git": git_revision(),
        "machine": f"{platform.machine()}, {platform.processor() or platform.system()}", "torch": torch.__version__,
        "gamma": GAMMA, "rows": args.rows, "shapes": {},
    }
    for B, H, T, D in shapes:
        row = errors(B, H, T, D, args.rows)
        results["shapes"][f"T={T} D={D}"] = {"shape": [B, H, T, D], **row}
        for window, errs in row.items():
            print(f"T={T:6d} D={D:3d} {window:10s} " + "  ".join(f"{n} {e:.2e}" for n, e in errs.items()), flush=True)
    if args.out:
        write_json(args.out, results)  # whole, its folder made


if __name__ == "__main__":
    main()
