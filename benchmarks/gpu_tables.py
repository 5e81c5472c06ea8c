"""The markdown tables of docs/kernel.md, from one saved GPU check (a folder holding the
``gpu_check.json`` of ``benchmarks/gpu_check.py`` and, when it ran, the ``attention_speed_cuda.json``
of ``benchmarks/attention_speed.py --device cuda``).

    python benchmarks/gpu_tables.py docs/results/gpu/checks/2026-12-04-h200
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _dtype(row: dict) -> str:
    return str(row.get("dtype", "torch.bfloat16")).removeprefix("torch.").replace("bfloat16", "bf16").replace(
        "float32", "fp32")


def _header(info: dict) -> str:
    return (f"{info['device']}, torch {info['torch']}, Triton {info.get('triton')}, {info['date'][:10]}, "
            f"git {str(info.get('git'))[:7]}")


def fused_kernel_table(check: dict) -> str:
    """Per shape: SDPA flash's time, and PSA's (the shear then SDPA flash, and the fused kernel; the
    kernel at gamma = 0 and with fp16 scores where the run has them) over it, forward and forward+backward; then each one's
    largest bf16 error against fp64; then, where the run timed them, the backward variants over the default
    backward; then, where the run profiled, the device time of each kernel."""
    rows = list(check["fused_kernel"].values())
    gamma0 = "fused_gamma0_over_sdpa" in rows[0]["forward"]
    fp16 = "fused_fp16_scores_over_sdpa" in rows[0]["forward"]  # a check from 2026-12-05 on
    lines = ["| B, H, T, D | | SDPA flash, ms | shear then SDPA / SDPA | fused kernel / SDPA |"
             + (" fused kernel at γ = 0 / SDPA |" if gamma0 else "") + (" fused kernel, fp16 scores / SDPA |" if fp16 else ""),
             "|---|---|---|---|---|" + ("---|" if gamma0 else "") + ("---|" if fp16 else "")]
    errors = ["| B, H, T, D | SDPA vs fp64 attention | shear then SDPA vs fp64 PSA | fused kernel vs fp64 PSA |"
              + (" fused kernel, fp16 scores, vs fp64 PSA |" if fp16 else ""), "|---|---|---|---|" + ("---|" if fp16 else "")]
    profiles, variants = [], []
    for row in rows:
        shape = ", ".join(map(str, row["shape"]))
        for name, gap in row.get("backward_variant_gradient_gap", {}).items():  # with --backward-variants
            r = row["forward+backward"]
            variants.append(f"| {shape} | `{name.removeprefix('fused_')}` | {r[f'{name}_over_fused']:.3f} | "
                            f"{r[f'{name}_over_sdpa']:.3f} | {gap:.2g} |")
        for label in ("forward", "forward+backward"):
            r = row[label]
            lines.append(f"| {shape} | {label} | {r['sdpa_ms']:.3f} | {r['shear_then_sdpa_over_sdpa']:.3f} | "
                         f"{r['fused_over_sdpa']:.3f} |" + (f" {r['fused_gamma0_over_sdpa']:.3f} |" if gamma0 else "")
                         + (f" {r['fused_fp16_scores_over_sdpa']:.3f} |" if fp16 else ""))
        e = row["error_vs_fp64"]
        errors.append(f"| {shape} | {e['sdpa']:.4f} | {e['psa_sdpa']:.4f} | {e['psa_fused']:.4f} |"
                      + (f" {e['psa_fused_fp16_scores']:.4f} |" if fp16 else ""))
        for path, kernels in row.get("profile_forward_backward", {}).items():
            profiles += [f"| {shape} | {path} | `{name[:60]}` | {ms:.3f} |" for name, ms in kernels.items()]
    spans = {tuple(row["error_rows"]) for row in rows if "error_rows" in row}
    where = ("first sequence and head, at most 4,096 rows" if not spans else  # a check from before 2026-12-05
             "first head of the first sequence, the last 4,096 query rows (all of them where T is shorter); "
             "each shape its own inputs")
    out = "\n".join(lines) + f"\n\nLargest absolute {_dtype(rows[0])} error ({where}):\n\n" + "\n".join(errors)
    if variants:
        out += ("\n\nThe fused kernel's backward variants (`fused_attention.backward_variant`), forward+backward:\n\n"
                "| B, H, T, D | variant | over the default | over SDPA | largest gradient gap to the default |\n"
                "|---|---|---|---|---|\n" + "\n".join(variants))
    if profiles:
        out += ("\n\nWhere forward+backward spends its time (torch.profiler, ms per call):\n\n"
                "| B, H, T, D | path | kernel | ms |\n|---|---|---|---|\n" + "\n".join(profiles))
    return out


def rope_shear_table(check: dict) -> str:
    """RoPE and the shear before SDPA, as separate passes and as ``rope_shear``, over RoPE alone."""
    lines = ["| B, H, T, D | | RoPE + SDPA, ms | RoPE, shear, SDPA / RoPE + SDPA | rope_shear + SDPA / RoPE + SDPA |",
             "|---|---|---|---|---|"]
    for row in check["rope_shear"].values():
        shape = ", ".join(map(str, row["shape"]))
        for label in ("forward", "forward+backward"):
            r = row[label]
            lines.append(f"| {shape} | {label} | {r['plain_ms']:.3f} | {r['separate_over_plain']:.3f} | "
                         f"{r['rope_shear_over_plain']:.3f} |")
    return "\n".join(lines)


def model_step_table(check: dict) -> str:
    """A training step of the preset the check ran (psa-92m on a GPU), plain against PSA (symmetric,
    gamma 0.8), eager and compiled."""
    step = check["model_step"]
    precision = step.get("precision", "bf16 autocast").removesuffix(" autocast")  # older checks: psa-92m in bf16
    lines = [f"| {step.get('preset', 'psa-92m')} step, B {step['batch']}, T {step['length']}, {precision} "
             "| plain, ms | PSA, ms | PSA / plain |",
             "|---|---|---|---|"]
    for mode in ("eager", "compiled"):
        if mode in step:
            r = step[mode]
            lines.append(f"| {mode} | {r['plain_ms']:.2f} | {r['psa_ms']:.2f} | {r['ratio']:.3f} |")
            if "psa_fused_ms" in r:  # eagerly on CUDA: PSA on the fused kernel (backend="fused")
                lines.append(f"| {mode}, fused kernel | {r['plain_ms']:.2f} | {r['psa_fused_ms']:.2f} | {r['fused_ratio']:.3f} |")
    profiles = [f"| {mode} | {model} | `{name[:60]}` | {ms:.3f} |" for mode in ("eager", "compiled")
                for model, kernels in step.get(mode, {}).get("profile", {}).items() for name, ms in kernels.items()]
    if profiles:
        lines += ["", "The step's most costly kernels (torch.profiler, ms per step):", "",
                  "| mode | model | kernel | ms |", "|---|---|---|---|", *profiles]
    return "\n".join(lines)


def compile_table(check: dict) -> str:
    """The trainer's step (psa-4m on induction, from the same seed) eagerly, under ``train.compile`` and under
    its CUDA graphs where the run has them; then, where the run profiled it, an eager step's kernel time
    against its wall time and the lines that waited for the device."""
    c = check["compile"]
    shape = f", B {c['batch']}, T {c['length']}" if "batch" in c else ""  # recorded from 2026-12-05 on
    lines = [f"| psa-4m trainer step on induction{shape}, {c.get('precision', 'bf16')} | ms per step | over eager "
             "| largest relative loss gap to eager |",
             "|---|---|---|---|"]
    for mode, label in (("eager", "eager"), ("compiled", "`train.compile=true`"),
                        ("cuda_graphs", "`train.compile=reduce-overhead` (CUDA graphs)"),
                        ("compiled_scored", "`train.compile=true`, the scored positions alone")):
        row = c.get(mode)
        if row is None:
            continue
        if "error" in row:
            lines.append(f"| {label} | failed: {row['error'][:80]} | | |")
            continue
        suffix = "" if mode == "compiled" else f"_{mode}"
        ratio, gap = ("1", "") if mode == "eager" else ("—", "—")  # "—": eager failed, nothing to compare with
        if f"step_time_ratio_{mode}_over_eager" in c:
            ratio = f"{c[f'step_time_ratio_{mode}_over_eager']:.3f}"
            gap = f"{c['largest_relative_loss_gap' + suffix]:.2g}"
        lines.append(f"| {label} | {row['step_ms']:.2f} | {ratio} | {gap} |")
    for key, what in (("eager_step_profile", "psa-4m's eager step"), ("paper_scale_step_profile", "The paper-scale sweep's"),
                      ("paper_scale_step_profile_plain", "The same run with plain attention, its"),
                      ("paper_scale_step_profile_rope_shear_eager", "With RoPE and the shear as eager operations, its")):
        profile = c.get(key)
        if profile is None:  # checks before 2026-12-05
            continue
        if key.startswith("paper_scale"):
            what += f" eager {profile['preset']} step (B {profile['batch']}, T {profile['length']})"
        if "error" in profile:
            lines += ["", f"Profiling {what[0].lower() + what[1:]} failed: {profile['error']}"]
            continue
        waits = ""
        if "syncs_per_step" in profile:  # on CUDA only
            sites = ", ".join(f"`{site}` {n:g}" for site, n in profile["syncs_per_step"].items()) or "none"
            waits = f"; waits for the device per step: {sites}"
        launches = f", {profile['launches_per_step']:g} launches" if "launches_per_step" in profile else ""  # CUDA only
        unread = (f" ({profile['wall_ms_unread']:.2f} ms with nothing read back between evaluations)"
                  if "wall_ms_unread" in profile else "")  # since 2026-12-06
        lines += ["", f"{what}: {profile['wall_ms']:.2f} ms of wall time{unread}, {profile['kernel_ms']:.2f} ms of kernels "
                      f"(torch.profiler){launches}{waits}."]
    if c.get("unfinished"):  # saved as it went, and cut short (a `timeout`): what it finished
        lines += ["", "The section was cut short: these are the rows it had finished."]
    return "\n".join(lines)


def host_overhead_table(check: dict) -> str:
    """PSA against plain attention in a step bound by the host (``step_overhead.py`` on the device): the
    operations each step dispatches and its milliseconds, training and cached decoding."""
    lines = ["| preset, 4 channels a head | step | precision | operations, plain | PSA | extra a layer | ms, plain | PSA "
             "| PSA / plain |", "|---|---|---|---|---|---|---|---|---|"]
    for r in check["host_overhead"]["training"] + check["host_overhead"]["decode"]:
        ops, ms = r["operations"], r["host_ms"]
        lines.append(f"| {r['preset']} | {r['step']} | {r['precision']} | {ops['plain']:,} | {ops['psa']:,} "
                     f"| {r['extra_operations_per_layer']:g} | {ms['plain']:.2f} | {ms['psa']:.2f} | {r['host_ratio']:.3f} |")
    return "\n".join(lines)


def correctness_table(check: dict) -> str:
    """The fused kernel against the fp64 reference on the device: the largest relative error per case."""
    lines = ["| case | largest relative error (output and every gradient) |", "|---|---|"]
    for case, errors in check["fused_correctness"].items():
        lines.append(f"| {case} | {max(errors.values()):.1e} |")
    return "\n".join(lines)


def attention_speed_table(speed: dict) -> str:
    """``benchmarks/attention_speed.py`` on the device: its rows and ratios."""
    B, H, T, D = speed["shape"]
    lines = [f"| B {B}, H {H}, T {T}, D {D}, fp32 | SDPA, ms | PSA, ms | PSA / SDPA |", "|---|---|---|---|"]
    for label, ms in speed["ms"].items():
        lines.append(f"| {label} | {ms['sdpa']:.3f} | {ms['psa']:.3f} | {speed['ratios'][label]:.3f} |")
    return "\n".join(lines)


def tables(folder: Path) -> str:
    """Every table the saved check in ``folder`` has, each under a one-line heading."""
    check = json.loads((folder / "gpu_check.json").read_text())
    owners = check.get("section_info", {})  # pieces run with --only into one folder: each section's run
    runs = {json.dumps(info, sort_keys=True) for info in [check["info"], *owners.values()]}
    one_run = len(runs) == 1
    parts = [f"Measured by `benchmarks/gpu_check.sh` ({_header(check['info'])}); saved in `{folder.as_posix()}`."
             if one_run else f"Measured by `benchmarks/gpu_check.sh` in several runs, each table's named above it; "
             f"saved in `{folder.as_posix()}`."]
    for section, table in (("fused_correctness", correctness_table), ("fused_kernel", fused_kernel_table),
                           ("rope_shear", rope_shear_table), ("model_step", model_step_table),
                           ("host_overhead", host_overhead_table), ("compile", compile_table)):
        if section in check:  # a check cut short, or one that ran other sections, lacks some
            if not one_run:
                parts += ["", f"`{section}`: {_header(owners.get(section, check['info']))}."]
            parts += ["", table(check)]
    for section, error in check.get("errors", {}).items():
        parts += ["", f"Section `{section}` failed on the device: {error}"]
    for section, why in check.get("skipped", {}).items():
        parts += ["", f"Section `{section}` was skipped: {why}"]
    speed = folder / "attention_speed_cuda.json"
    if speed.exists():
        parts += ["", attention_speed_table(json.loads(speed.read_text()))]
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    parser.add_argument("folder", type=Path, help="a folder with gpu_check.json (and attention_speed_cuda.json)")
    folder = parser.parse_args().folder
    if not (folder / "gpu_check.json").is_file():
        parser.error(f"{folder} holds no gpu_check.json; give the folder of a saved GPU check "
                     "(as docs/results/gpu/checks/2026-12-04-h200)")
    print(tables(folder), end="")


if __name__ == "__main__":
    main()
