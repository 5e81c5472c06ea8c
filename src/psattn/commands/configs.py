"""``psattn configs``: list the shipped example run configs, or print one."""

from __future__ import annotations

import argparse

from psattn.arguments import add_command


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``configs`` to the main parser's subcommands."""
    cf = add_command(subparsers, "configs", "list the shipped example run configs, or print one",
                     "The example configs ship inside the package, one per task and induction form, each a run of the quick "
                     "reproduction; psattn train --config NAME trains one.")
    cf.add_argument("name", nargs="?", help="the config to print as JSON (default: list them all)")
    cf.set_defaults(func=cmd_configs, needs_torch=False)  # psattn.cli imports no torch before it runs


def cmd_configs(args: argparse.Namespace) -> int:
    import json

    from psattn.training.shipped import shipped_configs

    shipped = shipped_configs()
    if args.name is None:
        for name, path in shipped.items():
            config = json.loads(path.read_text())
            print(f"{name:16s} {config['task']['name']}: {config['name']}")
        print("\npsattn train --config NAME --run-dir DIR trains one; psattn configs NAME > my.json copies it")
        return 0
    if args.name not in shipped:
        raise ValueError(f"no shipped config {args.name!r}; shipped: {', '.join(shipped)}")
    print(shipped[args.name].read_text().rstrip())
    return 0
