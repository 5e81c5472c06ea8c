"""Energy monotonicity report and staircase plateaus on synthetic series."""

import pytest
import torch

from psattn.meanfield.energy_monitor import check_monotone, energy_plateaus


def test_monotone_series_passes():
    t = torch.linspace(0, 1, 11, dtype=torch.float64)
    check = check_monotone(t, t**2 + 1, step_size=0.1)
    assert check.monotone and check.n_violations == 0 and check.first_violation_time is None


def test_drops_are_reported_with_time_and_step_size():
    t = torch.linspace(0, 1, 6, dtype=torch.float64)
    e = torch.tensor([[1.0, 1.0], [2.0, 2.0], [1.5, 2.5], [3.0, 3.0], [3.0, 2.9], [4.0, 4.0]], dtype=torch.float64)
    check = check_monotone(t, e, step_size=0.2)
    assert not check.monotone and check.n_violations == 2
    assert check.first_violation_time == float(t[1])
    worst = check.violations[0]
    assert (worst.step, worst.batch_index, worst.step_size) == (1, 0, 0.2)
    assert worst.relative_drop == 0.25
    assert "2 times" in check.summary()


def test_rounding_level_drops_are_tolerated():
    t = torch.linspace(0, 1, 3, dtype=torch.float64)
    e = torch.tensor([1.0, 1.0 - 1e-15, 1.0], dtype=torch.float64)
    assert check_monotone(t, e, step_size=0.5).monotone


def test_staircase_plateaus():
    t = torch.linspace(0, 10, 1001, dtype=torch.float64)
    # flat on [0, 3), a rise on [3, 4), flat on [4, 8), a rise on [8, 9), flat to the end
    e = torch.clamp(t - 3, 0, 1) + torch.clamp(t - 8, 0, 1)
    plateaus = energy_plateaus(t, e, min_length=0.5)
    assert [round(p.start, 2) for p in plateaus] == [0.0, 4.0, 9.0]
    assert [round(p.length, 2) for p in plateaus] == [3.0, 4.0, 1.0]
    assert [round(p.energy, 6) for p in plateaus] == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("check", [lambda t, e: check_monotone(t, e, step_size=0.1), energy_plateaus])
def test_a_series_that_does_not_fit_its_times_is_refused(check):
    """An energy series longer or shorter than its times was cut to fit."""
    t = torch.linspace(0.0, 1.0, 11, dtype=torch.float64)
    e = t**2 + 1
    for bad in (e[:-1], torch.cat([e, e[-1:]])):
        with pytest.raises(ValueError, match=r"times must be \(S\+1,\) and energy"):
            check(t, bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_an_energy_that_is_not_finite_fails_the_check(bad):
    """A NaN compares false and inf − inf is NaN: check_monotone called such a series non-decreasing, and
    energy_plateaus found no plateau in it."""
    t = torch.linspace(0.0, 1.0, 11, dtype=torch.float64)
    e = torch.stack([t**2 + 1, t + 1], -1)  # (S+1, B)
    e[4:, 1] = bad
    check = check_monotone(t, e, step_size=0.1)
    assert not check.monotone and check.n_non_finite == 7 and check.first_violation_time == pytest.approx(0.4)
    assert "energy not finite at 7 of its values (first at t = 0.4" in check.summary()
    with pytest.raises(ValueError, match="must be finite"):
        energy_plateaus(t, e[:, 1])


@pytest.mark.parametrize("rtol", [float("nan"), -1.0, float("inf"), "1e-3", True])
def test_check_monotone_refuses_a_tolerance_that_is_not_a_finite_number_at_least_0(rtol):
    """A NaN rtol compares false with every drop: an energy falling from 5 to 1 passed as non-decreasing."""
    t = torch.arange(5, dtype=torch.float64)
    with pytest.raises(ValueError, match="rtol must be a finite number ≥ 0"):
        check_monotone(t, torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0], dtype=torch.float64), 0.1, rtol=rtol)


@pytest.mark.parametrize("field", ["slope_tol", "min_length"])
@pytest.mark.parametrize("value", [float("nan"), -0.5])
def test_energy_plateaus_refuses_a_tolerance_that_is_not_a_finite_number_at_least_0(field, value):
    t = torch.arange(5, dtype=torch.float64)
    with pytest.raises(ValueError, match=f"{field} must be a finite number ≥ 0"):
        energy_plateaus(t, torch.tensor([0.0, 1.0, 1.0, 1.0, 2.0], dtype=torch.float64), **{field: value})


def test_empty_series_are_refused_and_a_single_time_has_no_plateau():
    """energy_plateaus of an empty series raised an IndexError (index -1 is out of bounds), and check_monotone
    passed it as non-decreasing."""
    with pytest.raises(ValueError, match=r"times must be \(S\+1,\) and energy \(S\+1,\), S ≥ 0, got \(0,\) and \(0,\)"):
        energy_plateaus(torch.zeros(0), torch.zeros(0))
    with pytest.raises(ValueError, match=r"S ≥ 0, got \(0,\) and \(0, 2\)"):
        check_monotone(torch.zeros(0), torch.zeros(0, 2), 0.1)
    assert energy_plateaus(torch.zeros(1), torch.ones(1)) == []
    assert check_monotone(torch.zeros(1), torch.ones(1, 2), 0.1).monotone
