"""Mean-field simulator speed: ratios measured in one run, never absolute claims without a baseline.

1. One USA Euler step (with renormalisation) of n particles on S^{d−1}: psattn's torch field against a
   straightforward NumPy implementation of the same step, for n ∈ {256, 1024, 4096}, d ∈ {3, 64}.
   Reported as particle-steps per second (n / seconds per step) and their ratio.
2. RoPE: the co-moving fast path (one n×n Gram matrix per step) against the direct per-pair path
   (O(n²d²)), on sizes where the direct path's (n, n, d, d) table fits in memory.
3. The paper's run (n = 256, τ = 20, USA, RK4, β = 1, with diagnostics) for every kernel: wall time
   (the median of three), and its ratio to plain USA.

Calls are interleaved (A, B, then B, A, ...) and medians compared, so machine noise largely cancels. Usage:

    python benchmarks/meanfield_speed.py [--threads 1] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import sys


def threads_asked(argv: list[str]) -> str:
    """The ``--threads`` the command line asks for, read as the parser reads it (``--threads=2``, ``--thr 2``),
    before NumPy is imported; "1" when absent or malformed (the parser then says what is wrong)."""
    pre = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    pre.add_argument("--threads", default="1")
    try:
        return pre.parse_known_args(argv)[0].threads
    except (argparse.ArgumentError, SystemExit):
        return "1"


if __name__ == "__main__":  # as many BLAS threads for NumPy as torch's, unless the caller chose otherwise
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, threads_asked(sys.argv[1:]))

import platform  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from cpu_threads import parse_with_threads  # noqa: E402

from psattn.files import write_json  # noqa: E402
from psattn.meanfield.config import build_kernel  # noqa: E402
from psattn.meanfield.dynamics import ComovingField, DirectField, normalise  # noqa: E402
from psattn.meanfield.experiments import PAPER_KERNELS, paper_configs  # noqa: E402
from psattn.meanfield.integrators import euler_step, rk4_step  # noqa: E402
from psattn.meanfield.simulate import simulate  # noqa: E402
from psattn.provenance import git_revision  # noqa: E402
from psattn.timing import interleaved_medians  # noqa: E402


def numpy_euler_step(x: np.ndarray, beta: float, h: float) -> np.ndarray:
    """The straightforward USA Euler step: x ← normalise(x + h P_x((1/n) Σ_j e^{β⟨x_i,x_j⟩} x_j))."""
    n = x.shape[0]
    drift = np.exp(beta * (x @ x.T)) @ x / n  # (n, d)
    v = drift - np.sum(drift * x, axis=1, keepdims=True) * x
    y = x + h * v
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def euler_rows(ns: tuple[int, ...], ds: tuple[int, ...], beta: float, h: float) -> list[dict]:
    rows = []
    for d in ds:
        for n in ns:
            gen = torch.Generator().manual_seed(0)
            x = normalise(torch.randn(1, n, d, generator=gen, dtype=torch.float64))
            field = ComovingField(torch.ones(n, n, dtype=torch.float64), beta, "usa")
            x_np = x[0].numpy().copy()
            agree = float(np.abs(euler_step(field, x, h)[0][0].numpy() - numpy_euler_step(x_np, beta, h)).max())
            repeats = 20 if n <= 1024 else 5
            t = interleaved_medians({"torch": lambda: euler_step(field, x, h),  # noqa: B023
                                     "numpy": lambda: numpy_euler_step(x_np, beta, h)}, repeats)  # noqa: B023
            rows.append({"n": n, "d": d, "torch_particle_steps_per_s": n / t["torch"],
                         "numpy_particle_steps_per_s": n / t["numpy"],
                         "ratio_torch_over_numpy": t["numpy"] / t["torch"],
                         "max_abs_difference": agree})
    return rows


def comoving_rows(cases: tuple[tuple[int, int], ...], beta: float, h: float) -> list[dict]:
    from psattn.meanfield.config import KernelConfig, SimulationConfig

    rows = []
    for n, d in cases:
        cfg = SimulationConfig(n=n, d=d, beta=beta, kernel=KernelConfig("rope", frequencies=(2 * np.pi / n,)),
                               tau=1.0)
        kernel = build_kernel(cfg)
        comoving = ComovingField(kernel.label_factor, beta, "usa")
        direct = DirectField(kernel.label_factor, kernel.pair_matrices(), beta, "usa")
        gen = torch.Generator().manual_seed(0)
        x = normalise(torch.randn(1, n, d, generator=gen, dtype=torch.float64))
        y = kernel.to_comoving(x)
        agree = float((kernel.from_comoving(rk4_step(comoving, y, h)[0]) - rk4_step(direct, x, h)[0]).abs().max())
        t = interleaved_medians(
            {"comoving": lambda: rk4_step(comoving, y, h), "direct": lambda: rk4_step(direct, x, h)}, repeats=5  # noqa: B023
        )
        rows.append({"n": n, "d": d, "ratio_direct_over_comoving": t["direct"] / t["comoving"],
                     "comoving_particle_steps_per_s": n / t["comoving"], "max_abs_difference": agree})
    return rows


def paper_rows(n: int, repeats: int = 3) -> list[dict]:
    """The paper's run of every kernel, the runs interleaved after one untimed round: the median seconds of each."""
    configs = {cfg.kernel.name: cfg for cfg in paper_configs(ns=(n,), kernels=PAPER_KERNELS)}
    steps = {}

    def run(name):
        steps[name] = simulate(configs[name]).times.shape[0] - 1

    seconds = interleaved_medians({name: lambda name=name: run(name) for name in configs}, repeats)
    rows = [{"kernel": name, "n": n, "steps": steps[name], "seconds": seconds[name]} for name in configs]
    base = rows[0]["seconds"]
    for row in rows:
        row["ratio_to_usa"] = row["seconds"] / base
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="n ∈ {256, 1024} only")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parse_with_threads(parser)
    ns = (256, 1024) if args.quick else (256, 1024, 4096)
    h = 0.01
    print(f"# mean-field speed, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"{platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, numpy {np.__version__}, {args.threads} thread(s), float64")

    euler = euler_rows(ns, (3, 64), args.beta, h)
    print("\n## USA Euler step: psattn (torch) against straightforward NumPy, same step")
    print("|    n |  d | torch particle-steps/s | numpy particle-steps/s | torch / numpy speed | max |Δ| |")
    print("|------|----|------------------------|------------------------|---------------------|--------|")
    for r in euler:
        print(f"| {r['n']:4d} | {r['d']:2d} | {r['torch_particle_steps_per_s']:22.3g} | "
              f"{r['numpy_particle_steps_per_s']:22.3g} | {r['ratio_torch_over_numpy']:19.2f} | "
              f"{r['max_abs_difference']:.1e} |")

    comoving = comoving_rows(((256, 3), (1024, 3), (64, 64)), args.beta, h)
    print("\n## RoPE RK4 step: co-moving fast path against the direct per-pair path")
    print("|    n |  d | direct / co-moving time | max |Δ| after one step |")
    print("|------|----|-------------------------|------------------------|")
    for r in comoving:
        print(f"| {r['n']:4d} | {r['d']:2d} | {r['ratio_direct_over_comoving']:23.1f} | "
              f"{r['max_abs_difference']:.1e} |")

    paper = paper_rows(256)
    print("\n## The paper's run, n = 256, τ = 20 (USA, RK4, diagnostics at 101 records)")
    print("| kernel | steps | seconds | time / plain USA |")
    print("|--------|-------|---------|------------------|")
    for r in paper:
        print(f"| {r['kernel']} | {r['steps']} | {r['seconds']:.2f} | {r['ratio_to_usa']:.2f} |")

    if args.json:  # whole, its folder made
        write_json(args.json, {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git": git_revision(),
                               "machine": platform.platform(), "torch": torch.__version__, "numpy": np.__version__,
                               "threads": args.threads, "euler": euler, "rope_comoving": comoving, "paper": paper})


if __name__ == "__main__":
    main()
