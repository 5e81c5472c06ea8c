"""The example run configs shipped inside the package: ``psattn configs`` lists them, and ``RunConfig.from_file``
reads one by name. A module of its own, importing no torch, so that ``psattn configs`` answers without it."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def shipped_configs() -> dict[str, Path]:
    """The example run configs shipped inside the package, by name (one per task and induction form; each a run
    of the quick reproduction)."""
    folder = Path(str(resources.files("psattn") / "data" / "configs"))
    return {p.stem: p for p in sorted(folder.glob("*.json"))}
