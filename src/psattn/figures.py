"""Writing matplotlib figures without touching the global backend (the Agg canvas, explicitly)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from psattn.files import atomic_write


def save_figure(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Save ``fig`` at ``path`` (parent folders created), as a PNG unless its suffix names another format
    matplotlib writes; a path without a suffix gets ``.png``. The file is written whole (``psattn.files``).
    Returns the path written."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder; name the figure's file (for example {path / 'curves.png'})")
    if not path.suffix:
        path = path.with_suffix(".png")  # what matplotlib would write, said
    FigureCanvasAgg(fig)
    # written whole (psattn.files): a save cut short (a full disk, a kill) keeps the figure already there
    atomic_write(path, lambda f: fig.savefig(f, format=path.suffix[1:].lower(), dpi=dpi, bbox_inches="tight"))
    return path
