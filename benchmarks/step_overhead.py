"""What PSA adds to a training step that is bound by the host: a preset's architecture at a tiny width
(4 channels a head, 2 rows of 16 tokens), where the arithmetic is negligible and a step takes the time
the host spends dispatching its operations. A GPU step whose kernels finish faster than Python
launches them takes the same time.

For each preset, plain attention (γ = 0) against symmetric PSA (γ = 0.8), in fp32 and under bf16
autocast: the computing aten operations one training step dispatches (forward, backward and the AdamW
step; on a GPU each is at least one kernel launch; the same count on every machine), and the host's
milliseconds per step, both models' steps interleaved in one process, one thread. Usage:

    python benchmarks/step_overhead.py [--presets psa-4m psa-92m] [--repeats 200] [--json FILE]
    python benchmarks/step_overhead.py --table AFTER.json BEFORE.json   # docs/kernel.md's table of two runs
"""

from __future__ import annotations

import argparse
import json
import platform
from datetime import datetime, timezone

import torch
import torch.nn.functional as F

from psattn.files import write_json
from psattn.models import AttentionConfig, DecoderLM
from psattn.models.presets import PRESETS, preset
from psattn.provenance import git_revision
from psattn.timing import dispatched_operations, interleaved_medians

#: the models compared: plain attention and the paper's symmetric shear
MODELS = {"plain": AttentionConfig("baseline", 0.0), "psa": AttentionConfig("symmetric", 0.8)}
VOCAB, BATCH, LENGTH = 64, 2, 16


def training_step(name: str, attention: AttentionConfig, bf16: bool, seed: int = 0):
    """One training step of preset ``name`` at 4 channels a head (forward, loss, backward, AdamW) as a
    function of no arguments, and the model's layer count."""
    heads = PRESETS[name]["n_heads"]
    torch.manual_seed(seed)
    model = DecoderLM(preset(name, d_model=4 * heads, vocab_size=VOCAB, attention=attention))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, VOCAB, (BATCH, LENGTH + 1), generator=torch.Generator().manual_seed(seed))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(inputs)  # (B, T, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step, model.config.n_layers


def measure(name: str, bf16: bool, repeats: int) -> dict:
    """The operations and host milliseconds per step of plain and PSA for one preset and precision."""
    steps, layers = {}, 0
    for label, attention in MODELS.items():
        steps[label], layers = training_step(name, attention, bf16)
    for step in steps.values():
        step()  # the first step creates the optimiser's state: count a later one
    operations = {label: dispatched_operations(step) for label, step in steps.items()}
    seconds = interleaved_medians(steps, repeats, warmup=5)
    extra = operations["psa"] - operations["plain"]
    return {
        "preset": name, "precision": "bf16 autocast" if bf16 else "fp32", "layers": layers,
        "operations": {label: sum(c.values()) for label, c in operations.items()},
        "extra_operations_per_layer": sum(extra.values()) / layers,
        "extra_operations": dict(sorted(extra.items())),
        "fewer_operations": dict(sorted((operations["plain"] - operations["psa"]).items())),
        "host_ms": {label: s * 1e3 for label, s in seconds.items()},
        "host_ratio": seconds["psa"] / seconds["plain"],
    }


def page_table(after: dict, before: dict) -> str:
    """The markdown table of docs/kernel.md: the rows of run ``after``, with the extra operations and the
    ratio of run ``before`` beside them."""
    lines = ["| preset, precision | operations a step, plain | PSA | extra a layer | host ms a step, plain | PSA "
             "| PSA / plain | before: extra a layer | before: PSA / plain |", "|---|---|---|---|---|---|---|---|---|"]
    for r, b in zip(after["rows"], before["rows"], strict=True):
        ops, ms = r["operations"], r["host_ms"]
        lines.append(f"| {r['preset']}, {r['precision']} | {ops['plain']:,} | {ops['psa']:,} "
                     f"| {r['extra_operations_per_layer']:g} | {ms['plain']:.2f} | {ms['psa']:.2f} | {r['host_ratio']:.3f} "
                     f"| {b['extra_operations_per_layer']:g} | {b['host_ratio']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    parser.add_argument("--presets", nargs="+", choices=sorted(PRESETS), default=["psa-4m", "psa-92m"])
    parser.add_argument("--repeats", type=int, default=200, help="timed steps of each model (default 200)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--table", nargs=2, metavar=("AFTER", "BEFORE"), help="print the table of two saved runs")
    args = parser.parse_args()
    if args.table:
        after, before = (json.loads(open(path).read()) for path in args.table)
        print(page_table(after, before))
        return
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    torch.set_num_threads(1)
    rows = [measure(name, bf16, args.repeats) for name in args.presets for bf16 in (False, True)]
    print(f"training step at {BATCH}x{LENGTH} tokens, 4 channels a head, 1 thread, torch {torch.__version__}, "
          f"{platform.machine()}: symmetric PSA (γ 0.8) against plain attention")
    print("| preset | precision | operations, plain | operations, PSA | extra per layer | host ms, plain | host ms, PSA "
          "| PSA / plain |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ops, ms = r["operations"], r["host_ms"]
        print(f"| {r['preset']} | {r['precision']} | {ops['plain']} | {ops['psa']} | {r['extra_operations_per_layer']:g} "
              f"| {ms['plain']:.2f} | {ms['psa']:.2f} | {r['host_ratio']:.3f} |")
    if args.json:
        result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "torch": torch.__version__,
                  "machine": platform.machine(), "processor": platform.processor(), "git": git_revision(),
                  "repeats": args.repeats, "rows": rows}
        write_json(args.json, result)  # whole, its folder made


if __name__ == "__main__":
    main()
