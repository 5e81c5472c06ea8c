"""Markdown tables for the reports."""

from __future__ import annotations

from typing import Any


def fmt(x: Any, digits: int = 3) -> str:
    """A table cell: ``x`` with ``digits`` decimals when a float, an em dash when None."""
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}f}" if digits else f"{x:.0f}"
    return str(x)


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table of ``header`` and ``rows``."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in row) + " |" for row in rows
    ]
