"""Writing matplotlib figures without touching the global backend (the Agg canvas, explicitly)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def save_figure(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Save ``fig`` as a PNG at ``path`` (parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path
