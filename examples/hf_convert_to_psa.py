"""Convert a trained transformers model to PSA and fine-tune it, on real text.

1. "Pretrain": a tiny Llama-architecture model from scratch with ``transformers.Trainer`` on the
   Jane Austen corpus that ships with psattn (byte-level tokens, held-out text never trained on).
2. Continue training two copies for the same steps, data and schedule: one plain, one converted to
   key-only PSA with γ warmed up from 0 (``GammaWarmup``), so the converted model starts exactly
   where the pretrained one ended.
3. Report for the pretrained model and both copies: held-out loss (nats per token, bits per byte),
   the in-context-learning score (late minus early loss in the context), the loss on the second copy
   of repeated random tokens (against the first) and of a repeated held-out passage, and the best
   induction-head score; see ``psattn.models.lm_eval``.

    pip install -e ".[hf,text]"
    python examples/hf_convert_to_psa.py --out reports/hf-convert

Runs offline on CPU; the defaults take about ten minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import transformers
from torch.utils.data import Dataset
from transformers import AutoModelForCausalLM, LlamaConfig, Trainer, TrainingArguments

from psattn.integrations.hf import GammaWarmup, apply_psa, load_psa_model, psa_spec, remove_psa
from psattn.models.lm_eval import text_metrics
from psattn.provenance import provenance
from psattn.tasks.text import TextConfig, sample


class Windows(Dataset):
    """Causal-LM rows for Trainer: ``labels`` = ``input_ids`` (transformers shifts them)."""

    def __init__(self, rows: torch.Tensor):
        self.rows = rows  # (N, T)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


def train(model, rows: torch.Tensor, steps: int, args, out: Path, callbacks=()) -> float:
    """``steps`` optimizer steps of Trainer on ``rows``; returns the wall time in seconds."""
    targs = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=args.batch, max_steps=steps, learning_rate=args.lr,
        lr_scheduler_type="cosine", warmup_steps=min(100, steps // 10), weight_decay=0.1, seed=args.seed,
        report_to=[], save_strategy="no", logging_steps=max(1, steps // 5), use_cpu=True, disable_tqdm=True,
    )
    start = time.perf_counter()
    Trainer(model=model, args=targs, train_dataset=Windows(rows), callbacks=list(callbacks)).train()
    return time.perf_counter() - start


def measure(model, text: TextConfig, held_out) -> dict:
    plain = psa_spec(model) is None
    if plain:  # the "baseline" variant (γ = 0) computes exactly the plain model and adds the hook points
        apply_psa(model, "baseline", 0.0)
    m = text_metrics(model.eval(), text, held_out, probe_rows=16, seed=0)
    if plain:
        remove_psa(model)
    loss = float(torch.tensor(m["position_loss"]).mean())
    return {
        "loss": loss, "bits_per_byte": m["bits_per_byte"], "icl_score": m["icl_score"],
        "random_first_loss": m["random_first_loss"], "random_second_loss": m["random_second_loss"],
        "passage_first_loss": m["passage_first_loss"], "passage_second_loss": m["passage_second_loss"],
        "best_induction_score": max(max(layer) for layer in m["induction_score"]),
    }


COLUMNS = (("loss", "held-out loss (nats/token)"), ("bits_per_byte", "bits/byte"), ("icl_score", "ICL score"),
           ("random_second_loss", "random 2nd copy (1st)"), ("passage_second_loss", "passage 2nd copy (1st)"),
           ("best_induction_score", "best induction score"))


def table(rows: dict[str, dict]) -> str:
    lines = ["| model | " + " | ".join(title for _, title in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for name, m in rows.items():
        cells = []
        for key, _ in COLUMNS:
            first = key.replace("second", "first")
            cells.append(f"{m[key]:.3f} ({m[first]:.3f})" if first != key else f"{m[key]:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="reports/hf-convert", help="output folder (default reports/hf-convert)")
    p.add_argument("--layers", type=int, default=1, help="decoder layers (default 1)")
    p.add_argument("--hidden", type=int, default=128, help="hidden size (default 128; 4 heads)")
    p.add_argument("--seq-len", type=int, default=256, help="context in bytes (default 256)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--pretrain-steps", type=int, default=1000)
    p.add_argument("--finetune-steps", type=int, default=500)
    p.add_argument("--gamma", type=float, default=1.0, help="key-only γ after the warm-up (default 1.0)")
    p.add_argument("--warmup-steps", type=int, default=100, help="γ warm-up steps (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = provenance(args.seed)  # the revision and time the run starts at

    text = TextConfig(corpus="austen", tokenizer="byte", seq_len=args.seq_len)
    g = torch.Generator().manual_seed(args.seed)
    held_out = sample(text, 128, torch.Generator().manual_seed(10_000 + args.seed), split="eval")
    pre_rows = sample(text, args.pretrain_steps * args.batch, g).inputs  # (N, T)
    fine_rows = sample(text, args.finetune_steps * args.batch, g).inputs  # (N, T), the same for both copies

    config = LlamaConfig(
        vocab_size=256, hidden_size=args.hidden, intermediate_size=4 * args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=args.seq_len, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_config(config)
    seconds = {"pretrain": train(model, pre_rows, args.pretrain_steps, args, out / "trainer")}
    model.save_pretrained(out / "pretrained")
    rows = {"pretrained": measure(model, text, held_out)}

    plain = AutoModelForCausalLM.from_pretrained(out / "pretrained")
    seconds["plain"] = train(plain, fine_rows, args.finetune_steps, args, out / "trainer")
    rows["+ plain fine-tune"] = measure(plain, text, held_out)

    psa = load_psa_model(out / "pretrained", "key_only", 0.0)  # γ = 0: exactly the pretrained model
    seconds["psa"] = train(psa, fine_rows, args.finetune_steps, args, out / "trainer",
                           [GammaWarmup(args.gamma, args.warmup_steps)])
    psa.save_pretrained(out / "psa")
    rows[f"+ key-only PSA fine-tune (γ 0 → {args.gamma:g})"] = measure(psa, text, held_out)
    assert psa_spec(psa).gamma == args.gamma

    params = sum(p.numel() for p in model.parameters())
    header = (f"{datetime.now(timezone.utc):%Y-%m-%d} · {platform.machine()}, {torch.get_num_threads()} threads, "
              f"torch {torch.__version__} · {args.layers}-layer Llama, hidden {args.hidden}, {params / 1e3:.0f}k "
              f"parameters, byte tokens, context {args.seq_len}, batch {args.batch} · pretrain {args.pretrain_steps} "
              f"steps, then {args.finetune_steps} steps per copy · wall {sum(seconds.values()) / 60:.1f} min")
    report = f"{header}\n\n{table(rows)}\n"
    (out / "report.md").write_text(report)
    meta = {**started, "transformers_version": transformers.__version__, "threads": torch.get_num_threads(),
            "parameters": params}
    (out / "results.json").write_text(json.dumps({"args": vars(args), "seconds": seconds, "rows": rows, "meta": meta},
                                                 indent=2))
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
