"""Compile the fused PSA kernels for a GPU architecture without a GPU, and print what each needs.

Triton's interpreter runs the kernels' logic on the CPU but never compiles them, so it cannot see
what only the compiler refuses (a global that is not a constexpr, a type the code generator rejects)
or what a tile shape costs. This script runs the compiler itself, down to the GPU's machine code
with the ``ptxas`` that Triton ships, for every kernel at the tile shapes the autotuner tries first
(``--all-shapes``: every one), and prints each one's shared memory, registers per thread and stack
(a stack means registers spilled to local memory), and the tensor-core instructions each product runs on.

The kernels are specialised as Triton specialises them at run time for contiguous (B, H, T, D)
streams of one query head per key head: pointers and sizes divisible by 16, feature strides and the
group size equal to 1. That specialisation is what lets the software pipeliner stage tiles through
shared memory asynchronously (``num_stages``), so without it the figures would be those of kernels
that never run. ``--plain`` also compiles each kernel with the shear switched off (gamma = 0), to
show what forming q̂ and k̂ in the tiles costs. ``--variants`` adds what ``fused_attention.backward_variant``
runs: the dk/dv kernel that adds dq̂ atomically (with the shear and, as the presheared variant runs it,
without) and the pass that forms q̂ or k̂ once. It must run in a process where ``TRITON_INTERPRET`` is not set.

    python scripts/compile_kernels.py [--arch 90] [--dtype bf16] [--head-dim 128] [--all-shapes] [--plain]
                                      [--fp16-scores] [--variants]
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("unset TRITON_INTERPRET: the interpreter's kernels cannot be compiled")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from psattn.ops import fused_attention as fa  # noqa: E402

#: pointer arguments: the streams and their gradients in the input dtype, the starts flags in bytes, the rest fp32
STREAMS = ("Q", "K", "V", "PQ", "PK", "O", "DO", "DV", "DX", "DPREV", "X", "PREV", "XHAT")
WORK = ("LSE", "DELTA", "DK", "DQ", "DXHAT")
#: integer arguments that are 1 for contiguous streams with one query head per key head (Triton makes them constants)
UNIT = ("sqd", "skd", "svd", "sod", "sdod", "spqd", "spkd", "sst", "sxd", "spd", "G")
#: the stream dtypes by their Triton names
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
#: the backward's elementwise kernels, each a tile of ``fa.ROWS_PER_PROGRAM`` rows with Triton's default warps
ELEMENTWISE = {"delta": fa._delta_kernel, "transpose": fa._shear_transpose_kernel}


def compile_kernel(name: str, tile: triton.Config, dtype: str, head_dim: int, causal: bool, arch: int,
                   shear: bool = True, atomic_dq: bool = False) -> dict:
    """Compile kernel ``name`` with one autotuner config (``atomic_dq``: the dk/dv kernel's that adds dq̂);
    returns its shared memory, registers, stack and seconds."""
    kernel = fa._TUNED[name].fn if name in fa._TUNED else {**ELEMENTWISE, "shear": fa._shear_kernel}[name]
    fn = kernel.fn if hasattr(kernel, "fn") else kernel
    switches = dict(D=head_dim, CAUSAL=causal, SHEAR_Q=shear, SHEAR_K=shear, HAS_PREV_Q=True, HAS_PREV_K=True,
                    HAS_PREV=True, HAS_STARTS=True, REPLICATE=True, PRECISION="ieee" if dtype == "fp32" else "tf32",
                    ACC=tl.float32, BLOCK_T=fa.ROWS_PER_PROGRAM, DQ_ATOMIC=atomic_dq, **tile.kwargs,
                    **fa.score_products_of(TORCH_DTYPES[dtype]))
    parameters = list(inspect.signature(fn).parameters)
    constants = {key: value for key, value in switches.items() if key in parameters}
    constants |= {key: 1 for key in UNIT if key in parameters}
    signature, attrs = {}, {}
    for index, arg in enumerate(parameters):
        if arg in constants:
            signature[arg] = "constexpr"
            continue
        if arg in STREAMS:
            signature[arg] = f"*{dtype}"
        elif arg in WORK:
            signature[arg] = "*fp32"
        elif arg == "S":
            signature[arg] = "*i8"
        else:
            signature[arg] = "fp32" if arg.startswith("gamma") or arg == "scale" else "i32"
        if signature[arg] != "fp32":
            attrs[(index,)] = [["tt.divisibility", 16]]
    start = time.perf_counter()
    compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constants, attrs=attrs),
                              target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": tile.num_warps, "num_stages": tile.num_stages})
    seconds = round(time.perf_counter() - start, 1)
    return {"shared_bytes": compiled.metadata.shared, **resources(compiled.asm["cubin"]), "seconds": seconds,
            "products": tensor_core_products(compiled.asm["ptx"])}


def tensor_core_products(ptx: str) -> list[str]:
    """The tensor-core instructions of ``ptx`` by kind, shape and input type (Hopper's ``wgmma``, the older ``mma``),
    e.g. ``["wgmma m64n128k16 bf16", "wgmma m64n64k16 f16"]``: a product's n is the width of its output tile (the
    key tile's for the scores q̂ k̂ᵀ, the head dimension for P·V), so each product's precision can be told apart."""
    found = re.findall(r"\b(wgmma|mma)(?:\.mma_async)?\.sync\.aligned\.(m\d+n\d+k\d+)\.(?:row\.col\.)?\w+\.(\w+)\.\w+", ptx)
    return sorted({f"{kind} {shape} {dtype}" for kind, shape, dtype in found})


def resources(cubin: bytes) -> dict:
    """Registers per thread and stack bytes of the one kernel in ``cubin`` (cuobjdump's resource usage)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        done = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-res-usage", str(path)], capture_output=True,
                              text=True, check=True)
    found = re.search(r"REG:(\d+) STACK:(\d+)", done.stdout)
    if found is None:
        raise RuntimeError(f"no resource usage in cuobjdump's output: {done.stdout[-500:]}")
    return {"registers": int(found[1]), "stack_bytes": int(found[2])}


def _line(arch: int, dtype: str, head_dim: int, what: str, row: dict) -> str:
    spilled = f", {row['stack_bytes']} bytes of stack (spilled)" if row["stack_bytes"] else ""
    products = f", tensor cores: {', '.join(row['products'])}" if row["products"] else ""
    return (f"sm_{arch} {dtype} D={head_dim} {what}: {row['shared_bytes']:,} bytes of shared memory, "
            f"{row['registers']} registers{spilled}{products}, compiled in {row['seconds']} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 for Hopper")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    parser.add_argument("--head-dim", type=int, default=128, choices=fa.HEAD_DIMS)
    parser.add_argument("--all-shapes", action="store_true", help="every tile shape the autotuner tries")
    parser.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    parser.add_argument("--plain", action="store_true", help="also compile each kernel with the shear off")
    parser.add_argument("--fp16-scores", action="store_true",
                        help="the score product in fp16, each row scaled (fused_attention.score_products)")
    parser.add_argument("--variants", action="store_true",
                        help="also the backward's variants (fused_attention.backward_variant)")
    args = parser.parse_args(argv)
    if args.fp16_scores:
        with fa.score_products(torch.float16):
            return _compile_all(args)
    return _compile_all(args)


def _compile_all(args: argparse.Namespace) -> int:
    causal = {"yes": (True,), "no": (False,), "both": (True, False)}[args.causal]
    for name, tuned in fa._TUNED.items():
        for tile in tuned.configs if args.all_shapes else tuned.configs[:1]:
            for is_causal in causal:
                for shear in (True, False) if args.plain else (True,):
                    row = compile_kernel(name, tile, args.dtype, args.head_dim, is_causal, args.arch, shear)
                    what = (f"{'causal' if is_causal else 'full':6s} {name:7s} tile {tile.kwargs['BLOCK_M']}x"
                            f"{tile.kwargs['BLOCK_N']} warps {tile.num_warps} stages {tile.num_stages}"
                            f"{'' if shear else ' (no shear)'}")
                    print(_line(args.arch, args.dtype, args.head_dim, what, row), flush=True)
    for name in ELEMENTWISE:
        row = compile_kernel(name, triton.Config({}), args.dtype, args.head_dim, True, args.arch)
        print(_line(args.arch, args.dtype, args.head_dim, name, row), flush=True)
    if args.variants:
        for tile in fa._TUNED["dkdv"].configs if args.all_shapes else fa._TUNED["dkdv"].configs[:1]:
            for is_causal in causal:
                for shear in (True, False):
                    row = compile_kernel("dkdv", tile, args.dtype, args.head_dim, is_causal, args.arch, shear, atomic_dq=True)
                    what = (f"{'causal' if is_causal else 'full':6s} dkdv with atomic dq tile {tile.kwargs['BLOCK_M']}x"
                            f"{tile.kwargs['BLOCK_N']} warps {tile.num_warps} stages {tile.num_stages}"
                            f"{'' if shear else ' (no shear: presheared)'}")
                    print(_line(args.arch, args.dtype, args.head_dim, what, row), flush=True)
        row = compile_kernel("shear", triton.Config({}), args.dtype, args.head_dim, True, args.arch)
        print(_line(args.arch, args.dtype, args.head_dim, "shear pass (presheared)", row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
