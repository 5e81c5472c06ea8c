"""Our trainer against a bare PyTorch loop (same model, batches and optimiser), as a ratio of
training steps per second measured interleaved in one run; with ``--compile``, the trainer under
``train.compile=true`` against itself eager instead (each compiled run's first step, which compiles, untimed).

    python benchmarks/trainer_speed.py [--task induction|text] [--steps 30 --repeats 3] [--compile] [--threads 1]

``text`` is the one-layer key-only model of the quick real-text experiment (Python source, BPE
vocabulary 1024, context 256, batch 32).
"""

import argparse
import dataclasses
import platform

import torch

from psattn.arguments import positive_int
from psattn.experiments.configs import small_induction_config
from psattn.experiments.studies.text import TEXT_PLANS, text_config
from psattn.training.speed import compiled_vs_eager, trainer_vs_bare_loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    parser.add_argument("--steps", type=positive_int, default=30,
                        help="steps a run, timed from the first one's end to the last one's (at least 2)")
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--task", choices=("induction", "text"), default="induction")
    parser.add_argument("--compile", action="store_true", help="time train.compile=true against eager instead")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch's intra-op threads (train.threads)")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error(f"--steps must be at least 2 (the time runs from the first step's end to the last's), got {args.steps}")
    if args.task == "text":
        config = text_config(TEXT_PLANS["quick"], 1, "key_only", 1.0, seed=0)
    else:
        config = small_induction_config("key_only", 1.0)
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, threads=args.threads))
    threads = f"{args.threads} thread{'s' if args.threads > 1 else ''}"
    print(f"{args.task}: {config.name}, {threads}, torch {torch.__version__}, {platform.machine()}")
    if args.compile:
        r = compiled_vs_eager(config, args.steps, args.repeats)
        print(f"eager {r['eager_steps_per_s']:.2f} steps/s, train.compile=true {r['compiled_steps_per_s']:.2f} steps/s, "
              f"ratio {r['ratio']:.3f}")
        return
    r = trainer_vs_bare_loop(config, args.steps, args.repeats)
    print(f"trainer {r['trainer_steps_per_s']:.2f} steps/s, bare loop {r['bare_steps_per_s']:.2f} steps/s, "
          f"ratio {r['ratio']:.3f}")


if __name__ == "__main__":
    main()
