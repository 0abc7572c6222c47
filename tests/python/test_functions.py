"""The free functions: the reference library's allocator example and the concentration proxy."""
import numpy as np
import pytest

import squeezekv


def test_seed_allocator_example():
    budgets = squeezekv.squeeze_budgets([0.1, 0.5, 0.9], 100, 4, 1.0)
    assert budgets == [180, 100, 20]
    assert sum(budgets) / len(budgets) == 100.0


def test_strength_zero_is_uniform_and_total_is_exact():
    assert squeezekv.squeeze_budgets([0.1, 0.5, 0.9], 100, 4, 0.0) == [100, 100, 100]
    budgets = squeezekv.squeeze_budgets(np.linspace(0.0, 1.0, 7), 50, 8, 1.0)
    assert sum(budgets) == 7 * 50 and min(budgets) >= 9


def test_bad_allocator_input():
    with pytest.raises(ValueError, match="strength"):
        squeezekv.squeeze_budgets([0.5], 100, 4, 2.0)
    with pytest.raises(ValueError, match="beta"):
        squeezekv.pyramid_budgets(4, 100, 4, 0.5)


# Issue 64.4: an average of 2^31 - 1 (or 1.2e9) gave negative budgets; refused as the command line does.
def test_an_average_beyond_the_command_lines_limit_is_refused():
    for avg in (2**31 - 1, 1_200_000_000):
        with pytest.raises(ValueError, match=f"avg_budget = {avg}: must be at most 1073741823"):
            squeezekv.squeeze_budgets([0.1, 0.5, 0.9], avg, 4, 1.0)
        with pytest.raises(ValueError, match=f"avg_budget = {avg}: must be at most 1073741823"):
            squeezekv.pyramid_budgets(12, avg, 4, 2.0)


def test_pyramid_example():
    assert squeezekv.pyramid_budgets(12, 512, 4, 2.0) == [1019, 927, 835, 742, 650, 558, 466, 374, 282, 189, 97, 5]


def test_concentration_score():
    rng = np.random.default_rng(1)
    same = np.tile(rng.standard_normal(16), (10, 1))
    assert squeezekv.concentration_score(same) == pytest.approx(1.0, abs=1e-6)
    assert squeezekv.concentration_score(np.eye(8)) == pytest.approx(0.0, abs=1e-6)
    keys = rng.standard_normal((32, 16))
    assert squeezekv.concentration_score(keys * 7.0) == pytest.approx(squeezekv.concentration_score(keys), abs=1e-6)
    assert squeezekv.concentration_score(keys[:1]) == 0.0
    heads = rng.standard_normal((1, 3, 20, 8)).astype(np.float16)
    mean = np.mean([squeezekv.concentration_score(heads[0, h]) for h in range(3)])
    assert squeezekv.concentration_score(heads) == pytest.approx(mean, abs=1e-6)
