import io
import sys

import pytest

from psattn.progress import bars_wanted, progress_bar


class Terminal(io.StringIO):
    def isatty(self):
        return True


def on_terminal(monkeypatch) -> Terminal:
    """stderr replaced by a terminal (inside the test: pytest resets sys.stderr between phases)."""
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    return stream


def test_a_bar_is_drawn_on_a_terminal(monkeypatch):
    terminal = on_terminal(monkeypatch)
    assert bars_wanted()
    for _ in progress_bar(range(3), desc="work", file=terminal):
        pass
    assert "work" in terminal.getvalue()


@pytest.mark.parametrize("why", ["piped", "TQDM_DISABLE", "not asked"])
def test_no_bar_when_piped_disabled_or_not_asked(monkeypatch, why):
    terminal = on_terminal(monkeypatch)
    enabled = why != "not asked"
    if why == "piped":
        monkeypatch.setattr(sys, "stderr", io.StringIO())
    if why == "TQDM_DISABLE":
        monkeypatch.setenv("TQDM_DISABLE", "1")
    assert not bars_wanted(enabled)
    for _ in progress_bar(range(3), enabled=enabled, desc="work", file=terminal):
        pass
    assert terminal.getvalue() == ""
