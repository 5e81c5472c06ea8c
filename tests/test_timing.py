"""Timing by ratios: interleaved medians treat every contender alike."""

from psattn.timing import interleaved_medians


def test_no_contender_always_runs_first_in_a_round():
    """Rounds ran in one fixed order, so a machine effect tied to position (the first call after a pause, a cache
    warmed by the previous call) fell on one contender alone: here the first call of each round takes 1 s, the
    second 2 s, and the order alone made A twice as fast as B."""
    calls = []

    def measure(fn):
        fn()
        calls.append(fn)
        return 1.0 if len(calls) % 2 == 1 else 2.0

    medians = interleaved_medians({"A": lambda: None, "B": lambda: None}, repeats=10, warmup=0, measure=measure)
    assert medians == {"A": 1.5, "B": 1.5}
