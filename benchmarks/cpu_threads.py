"""The options the benchmarks share: ``--threads``, torch's intra-op threads, one by default, so that ratios
measured on different machines compare; and ``--device``, checked before anything is timed."""

from __future__ import annotations

import argparse

import torch

from psattn.arguments import positive_int


def parse_with_threads(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Add ``--threads`` to ``parser``, parse the command line and set torch's intra-op threads."""
    parser.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def checked_device(parser: argparse.ArgumentParser, name: str) -> torch.device:
    """The device ``--device name`` names; a parser error for a name torch does not know or a GPU this machine lacks."""
    try:
        device = torch.device(name)
    except RuntimeError:
        parser.error(f"--device must be cpu or cuda, got {name!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {name} needs a CUDA device and this machine has none; use --device cpu")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device must be cpu or cuda, got {name!r}")
    return device
