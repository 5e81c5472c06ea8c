"""The task configs' field checks: each refuses a bad field with a one-line ValueError that names it."""

from __future__ import annotations

from typing import Any

#: the largest vocabulary a task may have, a BPE tokenizer's too (``TextConfig``): a model embeds every token,
#: and a synthetic task's draw of a row ranks every candidate token (``random_subsets``), a float each
MAX_VOCAB = 2**20


def _reason(why: str) -> str:
    return f" ({why})" if why else ""


def check_at_least(config: Any, name: str, low: int, why: str = "") -> None:
    """Refuse ``config.<name> < low``; ``why`` says what needs the bound."""
    value = getattr(config, name)
    if value < low:
        raise ValueError(f"{name} must be >= {low}{_reason(why)}, got {value}")


def check_up_to(config: Any, name: str, bound: str, why: str = "") -> None:
    """Refuse ``config.<name>`` outside ``[1, config.<bound>]``; ``why`` says what needs the bound."""
    value, high = getattr(config, name), getattr(config, bound)
    if not 1 <= value <= high:
        raise ValueError(f"{name} must be in [1, {bound}={high}]{_reason(why)}, got {value}")


def check_seq_len(config: Any, needed: int, layout: str, given: str = "") -> None:
    """Refuse ``config.seq_len < needed``, the length of ``layout`` (a row's parts); ``given`` names the
    field that sets ``needed`` where the message should show its value."""
    if config.seq_len < needed:
        setting = f" for {given}={getattr(config, given)}" if given else ""
        raise ValueError(f"seq_len={config.seq_len} too short{setting}: {layout} needs {needed}")


def check_vocab_size(config: Any, layout: str = "", limit: str = "") -> None:
    """Refuse a ``config.vocab_size`` above ``MAX_VOCAB``; ``layout`` says how the fields make it where it
    is derived, and ``limit`` what bounds those fields."""
    vocab = config.vocab_size
    if vocab > MAX_VOCAB:
        made = f" ({layout})" if layout else ""
        raise ValueError(f"vocab_size={vocab}{made} exceeds 2**20 = {MAX_VOCAB}, the largest vocabulary a task may have "
                         f"(a model embeds every token, a row's draw ranks them){'; ' + limit if limit else ''}")
