"""The ``--threads`` option of the CPU benchmarks: torch's intra-op threads, one by default, so that
ratios measured on different machines compare."""

from __future__ import annotations

import argparse

import torch


def parse_with_threads(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Add ``--threads`` to ``parser``, parse the command line and set torch's intra-op threads."""
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args
