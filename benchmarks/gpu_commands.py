"""Every command on one device: each shipped task trained a few steps there (one in bf16 and compiled
too), a sweep of two runs in worker processes, then eval, generate, export (ONNX and Hugging Face) and
footprint on the runs it trained, and the transformers integration (``apply_psa`` on a model on the
device, ``generate``, head scores). A command that needs an extra that is not installed is recorded
as skipped, with the extra's name; any other failure is recorded with its one-line error and the
next command still runs.

    python benchmarks/gpu_commands.py --device cuda --out results/   # the "commands" section of gpu_check
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import time
import traceback
from pathlib import Path

import torch

from psattn.cli import main as psattn
from psattn.training.config import shipped_configs

#: shrinks a shipped config to a few steps of a small model
TINY = ["model.d_model=64", "model.n_heads=2", "model.n_layers=2", "train.steps=4", "train.eval_every=2",
        "train.batch_size=8", "train.eval_size=16", "train.threads=1"]
#: what each command needs beyond torch, numpy and tqdm
NEEDS = {"text": ["tokenizers"], "onnx": ["onnx", "onnxruntime", "onnxscript"], "hf": ["transformers"]}


def _missing(names: list[str]) -> list[str]:
    return [name for name in names if importlib.util.find_spec(name) is None]


def _run(argv: list[str]) -> tuple[int, str]:
    """``psattn ARGV`` in this process: its exit code and what it printed (stdout and stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = psattn(argv)
        except SystemExit as exit:  # argparse and one-line errors exit
            code = exit.code if isinstance(exit.code, int) else 1
    return code, out.getvalue()


def command_smoke(device: str, out: Path) -> dict:
    """One row per command: ``ok`` with its seconds, ``skipped`` with the missing extra, or the error.
    Runs, exports and scores are written under ``out``, a working folder."""
    rows: dict[str, dict] = {}
    runs = out / "runs"

    def attempt(name: str, argv: list[str], needs: tuple[str, ...] = ()) -> bool:
        missing = _missing([m for need in needs for m in NEEDS[need]])
        if missing:
            rows[name] = {"status": "skipped", "missing": missing}
            return False
        start = time.perf_counter()
        code, printed = _run(argv)
        rows[name] = {"status": "ok" if code == 0 else "failed", "seconds": round(time.perf_counter() - start, 2),
                      **({} if code == 0 else {"code": code, "output": printed[-2000:]})}
        print(f"  {name:34s} {rows[name]['status']}", flush=True)
        return code == 0

    on = f"train.device={device}"
    for name in sorted(shipped_configs()):
        attempt(f"train {name}", ["train", "--config", name, "--run-dir", str(runs / name), "-q", "--set", *TINY, on],
                needs=("text",) if name == "text" else ())
    fast = ["train.precision=bf16", "train.compile=true"] if device.startswith("cuda") else []
    attempt("train induction bf16 compiled", ["train", "--config", "induction", "--run-dir", str(runs / "bf16"), "-q",
                                              "--set", *TINY, on, *fast])
    rows["sweep"] = _sweep(device, out / "sweep")
    for task in ("induction", "text"):
        if rows.get(f"train {task}", {}).get("status") != "ok":
            continue
        run = str(runs / task)
        attempt(f"eval {task}", ["eval", "--run-dir", run, "--device", device, "--json", str(out / f"eval-{task}.json")])
        attempt(f"export onnx {task}", ["export", "--run-dir", run, "--format", "onnx", "--out",
                                        str(out / f"{task}.onnx"), "--json", str(out / f"export-{task}.json")],
                needs=("onnx",))
        attempt(f"export hf {task}", ["export", "--run-dir", run, "--format", "hf", "--out", str(out / f"hf-{task}")],
                needs=("hf",))
        attempt(f"footprint {task}", ["footprint", run, "--json", str(out / f"footprint-{task}.json")])
    if rows.get("train text", {}).get("status") == "ok":
        attempt("generate text", ["generate", "--run-dir", str(runs / "text"), "--device", device, "--prompt", "def ",
                                  "--max-new-tokens", "20"])
    rows["hf integration"] = _hf_integration(device)
    return rows


def _sweep(device: str, out: Path) -> dict:
    """Two tiny runs through ``run_sweep``'s worker processes, each on ``device``."""
    from psattn.experiments.configs import small_config
    from psattn.experiments.sweep import run_sweep

    start = time.perf_counter()
    try:
        configs = [small_config(variant, 1.0, steps=4, device=device, d_model=32, n_heads=2) for variant in
                   ("baseline", "key_only")]
        results = run_sweep(configs, out, workers=2, progress=False)
    except Exception as err:
        return {"status": "failed", "output": "".join(traceback.format_exception_only(err))[-2000:]}
    print(f"  {'sweep (2 workers)':34s} ok", flush=True)
    return {"status": "ok", "seconds": round(time.perf_counter() - start, 2), "runs": len(results)}


def _hf_integration(device: str) -> dict:
    """``apply_psa`` on a tiny Llama on ``device``: greedy ``generate`` of a left-padded batch, head scores."""
    if _missing(NEEDS["hf"]):
        return {"status": "skipped", "missing": _missing(NEEDS["hf"])}
    import transformers

    from psattn.integrations.hf import apply_psa
    from psattn.models.heads import head_scores

    start = time.perf_counter()
    try:
        config = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
        torch.manual_seed(0)
        model = apply_psa(transformers.LlamaForCausalLM(config).to(device).eval(), variant="key_only", gamma=0.8)
        ids = torch.randint(1, 64, (2, 12), device=device)
        mask = torch.ones_like(ids)
        mask[1, :4] = 0  # left padding
        out = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
        scores = head_scores(model, batch=2, half=8, vocab_size=64)
    except Exception as err:
        return {"status": "failed", "output": "".join(traceback.format_exception_only(err))[-2000:]}
    print(f"  {'hf integration':34s} ok", flush=True)
    return {"status": "ok", "seconds": round(time.perf_counter() - start, 2), "generated": list(out.shape),
            "best_previous_token_score": float(scores.previous_token.max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="gpu_commands")
    args = parser.parse_args()
    out = Path(args.out)
    rows = command_smoke(args.device, out)
    (out / "commands.json").write_text(json.dumps(rows, indent=2))
    failed = [name for name, row in rows.items() if row["status"] == "failed"]
    print(f"{len(rows) - len(failed)} of {len(rows)} commands ok or skipped" + (f"; failed: {failed}" if failed else ""))


if __name__ == "__main__":
    main()
