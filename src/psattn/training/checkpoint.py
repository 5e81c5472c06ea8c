"""Atomic file writes: a file is either its old or its new whole self, never half written."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def _atomic_write(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """torch.save ``state`` to ``path`` atomically (temporary file, fsync, rename)."""
    _atomic_write(Path(path), lambda f: torch.save(state, f))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)


def write_json(path: str | Path, data: Any) -> None:
    _atomic_write(Path(path), lambda f: f.write(json.dumps(data, indent=2).encode()))


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    _atomic_write(Path(path), lambda f: f.write("".join(json.dumps(r) + "\n" for r in rows).encode()))


def write_text(path: str | Path, text: str) -> None:
    _atomic_write(Path(path), lambda f: f.write(text.encode()))
