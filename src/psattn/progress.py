"""Progress bars that appear only where someone watches them.

A bar is drawn on stderr when the caller asks for one, stderr is a terminal and ``TQDM_DISABLE`` is
unset (or empty); piped output and CI logs get no redraws. Callers print or log a summary line
when the work is done, so nothing is lost when no bar is drawn.
"""

from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm


def bars_wanted(enabled: bool = True) -> bool:
    """Whether a bar would be drawn: ``enabled``, stderr a terminal and ``TQDM_DISABLE`` unset."""
    return bool(enabled) and sys.stderr.isatty() and not os.environ.get("TQDM_DISABLE")


def progress_bar(iterable=None, *, enabled: bool = True, **kwargs) -> tqdm:
    """``tqdm(iterable, **kwargs)``, disabled unless ``bars_wanted``."""
    return tqdm(iterable, disable=not bars_wanted(enabled), **kwargs)


def console_line(line: str) -> None:
    """Print ``line`` on stderr without breaking a bar being drawn there (tqdm moves the bar below it)."""
    tqdm.write(line, file=sys.stderr)
