"""When a two-layer model goes through its induction-head phase change (Olsson et al. 2022).

The rule, applied to a run's evaluation rows (its ``metrics.jsonl``): the phase change is at the
first evaluation after step 0 at which the best head's score (``key``: ``prefix_matching_score``, on a
repeated held-out passage, on real text; ``induction_score`` on synthetic tasks; the maximum over every
layer and head, NaN if any head's is: ``best``) reaches ``threshold`` and stays there for ``confirm``
evaluations in a row. Uniform attention scores about (ln 2) / n on a row of 2 * n tokens
(``uniform_score``): 0.005 on text rows of 256 tokens, 0.02 on rows of 64, 0.028 on the induction
task's probe of 49. The default threshold, 0.1, is about twenty, five and three and a half times that;
a head that puts a tenth of its mass on the one token after the same token in the first copy,
consistently, is matching prefixes. The ICL score (text only) should drop at the same time;
``PhaseChange`` records it before and after.

First copying (text runs, any model, one layer too) is read the same way off a behaviour instead of a
head: the first evaluation at which the repeated random tokens' copy gain (loss on their first copy
minus their second, nats) reaches ``COPY_THRESHOLD`` and stays there for ``confirm`` evaluations.
Random tokens cannot be predicted from the corpus, so only copying lowers their second copy; 0.25
nats is about twice the most that two plain layers show before their phase change at context 64
(0.02 to 0.13 in ``psattn sweep text_pilot``).

Why the passage on real text: Olsson et al. read prefix matching on repeated random tokens (a text run's
``induction_score``); the text rule reads the same attention on a repeated held-out passage
(``psattn.models.lm_eval``). A token that recurs within the passage pulls a strong head's score down (one
layer of smeared keys ends at 0.38 on passages, 0.48 on random tokens), but on this project's runs (BPE
1024 on Python source) forming heads score higher on passages, and there the passage score marks the phase
change where copying shows it. On the 26 saved context-64 text runs (``docs/results``: ``text_pilot``,
``text_phase``, ``text_mlp``), at the same threshold and ``confirm``, the passage score finds a phase change
in 24: in each of the 23 that start copying, 0 to 2.4M tokens before first copying, and in two plain
layers' seed 2 at 19.2M (whose copy gain stays below the copying threshold, 0.21 at the end). The random-token score
finds 17, never before the passage score (up to 5.4M tokens after it, up to 3.0M after first copying), and
none in 6 runs that copy: one key-only layer (four runs, with an MLP or without), one symmetric layer, two
key-only layers with MLPs (seed 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

THRESHOLD = 0.1
CONFIRM = 2
COPY_THRESHOLD = 0.25


def uniform_score(context: int) -> float:
    """The prefix-matching score of uniform causal attention on a text run's probe of ``context`` tokens (a
    passage of n = context // 2 tokens, then its repeat): the mean of 1 / (p + 1), the weight position p puts
    on any one earlier token, over the repeat's positions p = n .. 2n - 1; about (ln 2) / n."""
    n = context // 2
    return sum(1 / (p + 1) for p in range(n, 2 * n)) / n


@dataclass(frozen=True)
class PhaseChange:
    """When a run's phase change happened: step, training tokens, seconds and the best head's score."""
    step: int  # first evaluated step at the threshold
    tokens: int  # training tokens seen by then
    seconds: float  # wall seconds of training by then
    score: float  # the best head's score there
    icl_before: float | None  # ICL score at the evaluation before (text runs)
    icl_at: float | None  # ... and at the phase change


def best(scores: Iterable[float]) -> float:
    """The largest of ``scores``; NaN when any is NaN, wherever it sits (Python's ``max`` kept a NaN only in
    first place), so a head whose score is NaN makes its layer's best, and the best head's, NaN: below any
    threshold."""
    scores = list(scores)
    return math.nan if any(math.isnan(s) for s in scores) else max(scores)


def best_head(row: dict[str, Any], key: str) -> float:
    """The largest score of any head in ``row[key]`` (a list of layers of per-head scores; NaN as ``best`` says)."""
    return best(best(layer) for layer in row[key])


def random_copy_gain(row: dict[str, Any]) -> float:
    """Nats by which the second copy of the repeated random tokens is easier than the first."""
    return row["random_first_loss"] - row["random_second_loss"]


def first_sustained(rows: list[dict[str, Any]], score: Callable[[dict[str, Any]], float], threshold: float,
                    confirm: int = CONFIRM) -> PhaseChange | None:
    """The first evaluation after step 0 at which ``score(row)`` reaches ``threshold`` and stays there for
    ``confirm`` evaluations in a row, or None."""
    if confirm < 1:
        raise ValueError(f"confirm must be >= 1, got {confirm}")
    trained = [r for r in rows if r["step"] > 0]
    for i in range(len(trained) - confirm + 1):
        if all(score(r) >= threshold for r in trained[i : i + confirm]):
            at = trained[i]
            earlier = [r for r in rows if r["step"] < at["step"]]  # the step-0 row too: the evaluation before the first
            before = max(earlier, key=lambda r: r["step"]) if earlier else None
            return PhaseChange(at["step"], at.get("tokens", 0), at.get("seconds", 0.0), score(at),
                               None if before is None else before.get("icl_score"), at.get("icl_score"))
    return None


def detect_phase_change(rows: list[dict[str, Any]], key: str = "prefix_matching_score", *,
                        threshold: float = THRESHOLD, confirm: int = CONFIRM) -> PhaseChange | None:
    """The phase change in ``rows`` by the rule above, or None when the rows do not show one."""
    return first_sustained(rows, lambda row: best_head(row, key), threshold, confirm)


def detect_copying(rows: list[dict[str, Any]], *, threshold: float = COPY_THRESHOLD,
                   confirm: int = CONFIRM) -> PhaseChange | None:
    """First copying in a text run's ``rows`` (the random tokens' copy gain, see above), or None."""
    return first_sustained(rows, random_copy_gain, threshold, confirm)
