"""``psattn generate``: continue a prompt with a text run's model and tokenizer."""

from __future__ import annotations

import argparse
from pathlib import Path

from psattn.arguments import add_command, add_device, add_run_dir, positive_int, probability, required_run_dir, seed_int


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``generate`` to the main parser's subcommands."""
    gen = add_command(subparsers, "generate", "continue a prompt with a text run's model and tokenizer")
    add_run_dir(gen, "run directory of a text run")
    gen.add_argument("--prompt", required=True, help="text to continue")
    gen.add_argument("--max-new-tokens", type=positive_int, default=200,
                     help="tokens to generate; past the context the run trained on, the window slides")
    gen.add_argument("--temperature", type=float, default=0.8, help="sampling temperature; 0 is greedy")
    gen.add_argument("--top-k", type=positive_int, help="sample among the k most likely tokens only")
    gen.add_argument("--top-p", type=probability, metavar="P",
                     help="sample among the fewest most likely tokens that hold probability P (nucleus sampling)")
    gen.add_argument("--samples", type=positive_int, default=1, metavar="N",
                     help="continuations to write, with seeds SEED, SEED+1, ...")
    gen.add_argument("--seed", type=seed_int, default=0, help="sampling seed")
    add_device(gen)
    gen.set_defaults(func=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    from psattn.models.generate import continue_text
    from psattn.training.config import RunConfig
    from psattn.training.run_dir import load_trained, run_tokenizer

    if args.temperature == 0 and (args.top_k is not None or args.top_p is not None):
        raise ValueError("--top-k and --top-p apply when sampling, and --temperature 0 decodes greedily: "
                         "drop them, or give a temperature above 0")
    if args.temperature == 0 and args.samples > 1:  # the seeds apply only when sampling: N copies of one text
        raise ValueError(f"--samples {args.samples} writes that many sampled continuations, and --temperature 0 decodes "
                         "greedily, the same text for every seed: drop --samples, or give a temperature above 0")
    if not (Path(required_run_dir(args)) / "checkpoint.pt").exists():
        raise ValueError(f"{args.run_dir} holds no trained run (no checkpoint.pt)")
    tokenizer = run_tokenizer(args.run_dir)
    model = load_trained(args.run_dir, args.device)
    context = RunConfig.from_file(Path(args.run_dir) / "config.json").task.seq_len
    for i in range(args.samples):  # sample i is what --seed SEED+i alone gives
        text = continue_text(model, tokenizer, args.prompt, args.max_new_tokens, temperature=args.temperature,
                             top_k=args.top_k, top_p=args.top_p, seed=args.seed + i, context=context)
        if args.samples > 1:
            print(f"{'' if i == 0 else chr(10)}--- sample {i + 1} of {args.samples} (seed {args.seed + i}) ---")
        print(args.prompt + text)
    return 0
