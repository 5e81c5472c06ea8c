"""What PSA adds to a training step and to a decode step that are bound by the host: a preset's
architecture at a tiny width (4 channels a head, 2 rows of 16 tokens), where the arithmetic is negligible
and a step takes the time the host spends dispatching its operations. A GPU step whose kernels finish
faster than Python launches them takes the same time.

For each preset, plain attention (γ = 0) against symmetric PSA (γ = 0.8): a training step in fp32 and
under bf16 autocast (forward, backward and the AdamW step), and a cached decode step (one new token a
row after a prompt of 16, the cache then rolled back to the prompt) with fp32 and with bf16 weights.
For each, the computing aten operations one step dispatches (on a GPU each is at least one kernel
launch; the same count on every machine of a device type: a GPU's AdamW step is fused, as the trainer's,
so PSA's extra operations compare across devices and the totals do not), and the milliseconds per step, both models' steps
interleaved in one process, one thread (with ``--device cuda``, each step waits for the device). Usage:

    python benchmarks/step_overhead.py [--presets psa-4m psa-92m] [--repeats 200] [--device cpu] [--json FILE]
    python benchmarks/step_overhead.py --table AFTER.json BEFORE.json   # docs/kernel.md's table of two runs
    python benchmarks/step_overhead.py --decode-table RUN.json          # its decode rows of one run
"""

from __future__ import annotations

import argparse
import json
import platform
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F
from cpu_threads import checked_device

from psattn.files import write_json
from psattn.models import AttentionConfig, DecoderLM
from psattn.models.presets import PRESETS, preset
from psattn.provenance import git_revision
from psattn.timing import dispatched_operations, interleaved_medians
from psattn.training.schedule import fused_on

#: the models compared: plain attention and the paper's symmetric shear
MODELS = {"plain": AttentionConfig("baseline", 0.0), "psa": AttentionConfig("symmetric", 0.8)}
VOCAB, BATCH, LENGTH = 64, 2, 16


WARMUP = 5
#: a decode step's samples for each training step's
DECODE_SAMPLES = 10


def tiny_model(name: str, attention: AttentionConfig, device: torch.device, seed: int = 0) -> DecoderLM:
    """Preset ``name``'s architecture at 4 channels a head, on ``device``."""
    torch.manual_seed(seed)
    heads = PRESETS[name]["n_heads"]
    return DecoderLM(preset(name, d_model=4 * heads, vocab_size=VOCAB, attention=attention)).to(device)


def training_step(name: str, attention: AttentionConfig, bf16: bool, device: torch.device, seed: int = 0):
    """One training step of preset ``name`` at 4 channels a head (forward, loss, backward, AdamW) as a
    function of no arguments, and the model's layer count."""
    model = tiny_model(name, attention, device, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused_on(model.parameters()) or None)  # as the trainer's
    tokens = torch.randint(0, VOCAB, (BATCH, LENGTH + 1), generator=torch.Generator().manual_seed(seed)).to(device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(inputs)  # (B, T, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step, model.config.n_layers


def decode_step(name: str, attention: AttentionConfig, bf16: bool, device: torch.device, seed: int = 0):
    """One cached decode step of preset ``name`` at 4 channels a head (a token a row after a prompt of
    ``LENGTH``, then the cache rolled back to the prompt, so that every call sees the same cache) as a
    function of no arguments, and the model's layer count."""
    model = tiny_model(name, attention, device, seed).eval()
    if bf16:
        model = model.to(torch.bfloat16)
    tokens = torch.randint(0, VOCAB, (BATCH, LENGTH + 1), generator=torch.Generator().manual_seed(seed)).to(device)
    cache = model.new_cache()
    cache.reserve(LENGTH + 1)  # the step writes its token into room the cache has, as in a generation
    with torch.no_grad():
        model(tokens[:, :-1], cache=cache)

    def step():
        saved = cache.snapshot()
        with torch.no_grad():
            model(tokens[:, -1:], cache=cache)  # (B, 1, V)
        cache.restore(saved)

    return step, model.config.n_layers


def measure(name: str, bf16: bool, repeats: int, device: torch.device, decode: bool = False) -> dict:
    """The operations and milliseconds per step of plain and PSA for one preset and precision: a training
    step, or with ``decode`` a cached decode step."""
    steps, layers = {}, 0
    repeats = DECODE_SAMPLES * repeats if decode else repeats  # a decode step is short: more samples, little time
    for label, attention in MODELS.items():
        if decode:
            steps[label], layers = decode_step(name, attention, bf16, device)
        else:
            steps[label], layers = training_step(name, attention, bf16, device)
    for step in steps.values():
        step()  # a training step's first call creates the optimiser's state: count a later one
    operations = {label: dispatched_operations(step) for label, step in steps.items()}
    seconds = interleaved_medians({label: synced(step, device) for label, step in steps.items()}, repeats, warmup=WARMUP)
    extra = operations["psa"] - operations["plain"]
    precision = ("bf16 weights" if decode else "bf16 autocast") if bf16 else "fp32"
    return {
        "preset": name, "step": "decode" if decode else "training", "precision": precision, "layers": layers,
        "samples": repeats,
        "operations": {label: sum(c.values()) for label, c in operations.items()},
        "extra_operations_per_layer": sum(extra.values()) / layers,
        "extra_operations": dict(sorted(extra.items())),
        "fewer_operations": dict(sorted((operations["plain"] - operations["psa"]).items())),
        "host_ms": {label: s * 1e3 for label, s in seconds.items()},
        "host_ratio": seconds["psa"] / seconds["plain"],
    }


def page_table(after: dict, before: dict) -> str:
    """The markdown table of docs/kernel.md: the rows of run ``after``, with the extra operations and the
    ratio of run ``before``'s row of the same preset and precision beside them (ValueError where it has none)."""
    lines = ["| preset, precision | operations a step, plain | PSA | extra a layer | host ms a step, plain | PSA "
             "| PSA / plain | before: extra a layer | before: PSA / plain |", "|---|---|---|---|---|---|---|---|---|"]
    earlier = {(b["preset"], b["precision"]): b for b in before["rows"]}
    missing = [f"{r['preset']}, {r['precision']}" for r in after["rows"] if (r["preset"], r["precision"]) not in earlier]
    if missing:
        raise ValueError(f"the run before has no row {'; '.join(missing)}: run both with the same --presets")
    for r in after["rows"]:
        b = earlier[(r["preset"], r["precision"])]  # each row beside its own preset's and precision's
        ops, ms = r["operations"], r["host_ms"]
        lines.append(f"| {r['preset']}, {r['precision']} | {ops['plain']:,} | {ops['psa']:,} "
                     f"| {r['extra_operations_per_layer']:g} | {ms['plain']:.2f} | {ms['psa']:.2f} | {r['host_ratio']:.3f} "
                     f"| {b['extra_operations_per_layer']:g} | {b['host_ratio']:.3f} |")
    return "\n".join(lines)


def decode_table(run: dict) -> str:
    """The markdown table of docs/kernel.md's decode rows of one saved run."""
    lines = ["| preset, weights | operations a decode step, plain | PSA | extra a layer | host ms a step, plain | PSA "
             "| PSA / plain |", "|---|---|---|---|---|---|---|"]
    for r in run["decode_rows"]:
        ops, ms = r["operations"], r["host_ms"]
        lines.append(f"| {r['preset']}, {r['precision'].removesuffix(' weights')} | {ops['plain']:,} | {ops['psa']:,} "
                     f"| {r['extra_operations_per_layer']:g} | {ms['plain']:.3f} | {ms['psa']:.3f} | {r['host_ratio']:.3f} |")
    return "\n".join(lines)


def synced(step, device: torch.device):
    """``step``, then on a GPU a wait for the device: its work is timed, not only its launches."""
    if device.type != "cuda":
        return step
    return lambda: (step(), torch.cuda.synchronize())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    parser.add_argument("--presets", nargs="+", choices=sorted(PRESETS), default=["psa-4m", "psa-92m"])
    parser.add_argument("--repeats", type=int, default=200,
                        help="timed training steps of each model (default 200); ten times as many decode steps")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--table", nargs=2, metavar=("AFTER", "BEFORE"), help="print the table of two saved runs")
    parser.add_argument("--decode-table", metavar="RUN", help="print the decode rows' table of a saved run")
    args = parser.parse_args()
    for path in (args.table or []) + [args.decode_table] * bool(args.decode_table):
        if not Path(path).is_file():
            parser.error(f"no saved run {path}; give the JSON file of a run with --json")
    if args.table:
        after, before = (json.loads(open(path).read()) for path in args.table)
        try:
            print(page_table(after, before))
        except ValueError as err:
            parser.error(str(err))
        return
    if args.decode_table:
        print(decode_table(json.loads(open(args.decode_table).read())))
        return
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    device = checked_device(parser, args.device)
    torch.set_num_threads(1)
    rows = [measure(name, bf16, args.repeats, device) for name in args.presets for bf16 in (False, True)]
    decode_rows = [measure(name, bf16, args.repeats, device, decode=True) for name in args.presets for bf16 in (False, True)]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine()
    print(f"{BATCH} rows of {LENGTH} tokens, 4 channels a head, 1 thread, torch {torch.__version__}, {where}: "
          f"symmetric PSA (γ 0.8) against plain attention")
    print("| preset | step | precision | operations, plain | operations, PSA | extra per layer | ms, plain | ms, PSA "
          "| PSA / plain |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows + decode_rows:
        ops, ms = r["operations"], r["host_ms"]
        print(f"| {r['preset']} | {r['step']} | {r['precision']} | {ops['plain']} | {ops['psa']} "
              f"| {r['extra_operations_per_layer']:g} | {ms['plain']:.2f} | {ms['psa']:.2f} | {r['host_ratio']:.3f} |")
    if args.json:
        result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "torch": torch.__version__,
                  "machine": platform.machine(), "processor": platform.processor(), "git": git_revision(),
                  "device": where, "repeats": args.repeats, "rows": rows, "decode_rows": decode_rows}
        write_json(args.json, result)  # whole, its folder made


if __name__ == "__main__":
    main()
