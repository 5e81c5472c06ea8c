"""Reading the JSON files a user hands to psattn (configs, sweep results), with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _a_file(path: str | Path, what: str) -> Path:
    """``path`` as a Path; ValueError, naming ``what``, unless it is a regular file."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{what} {path} does not exist")
    if not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise ValueError(f"{what} {path} is {kind}; give the path of a JSON file")
    return path


class DuplicateKey(ValueError):
    """A key given twice in one JSON object (``args[0]``)."""


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; DuplicateKey when a key comes twice (json keeps the last, silently)."""
    data = dict(pairs)
    if len(data) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return data


def loads(text: str) -> Any:
    """``json.loads(text)``, raising ``DuplicateKey`` for a key given twice in one object (json keeps the
    last one silently; which one was meant?)."""
    return json.loads(text, object_pairs_hook=_one_value_per_key)


def read_json(path: str | Path, *, what: str = "file", object_only: bool = False) -> Any:
    """The parsed contents of ``path``. Raises ValueError, naming ``what`` and the path, when the file
    does not exist, is not valid UTF-8 JSON, gives a key twice in one object (which one was meant?), or
    (``object_only``) does not hold a JSON object."""
    path = _a_file(path, what)
    try:
        data = loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    except DuplicateKey as err:
        raise ValueError(f"{path} gives the key {err.args[0]!r} twice in one object; keep the one you mean") from None
    if object_only and not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def read_jsonl(path: str | Path, *, what: str = "file") -> list[Any]:
    """One parsed JSON value per non-empty line of ``path`` (a metrics.jsonl), with the same errors."""
    path = _a_file(path, what)
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path} line {number} is not valid JSON: {err}") from None
    return rows
