"""The allocators and the concentration proxy as free functions (the reference library's names)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import _checks, _native


def squeeze_budgets(concentrations: Sequence[float], avg_budget: int, n_sink: int = 4,
                    strength: float = 1.0) -> list:
    """Per-layer budgets from measured concentrations; they sum to exactly len * avg_budget.
    ``squeeze_budgets([0.1, 0.5, 0.9], 100, 4, 1.0) == [180, 100, 20]``."""
    return _native.squeeze_budgets([float(c) for c in concentrations], _checks.integer(avg_budget, "avg_budget"),
                                   _checks.integer(n_sink, "n_sink"), _checks.number(strength, "strength"))


def pyramid_budgets(n_layers: int, avg_budget: int, n_sink: int = 4, beta: float = 2.0) -> list:
    """PyramidKV's fixed linear taper, mean exactly avg_budget."""
    return _native.pyramid_budgets(_checks.integer(n_layers, "n_layers"), _checks.integer(avg_budget, "avg_budget"),
                                   _checks.integer(n_sink, "n_sink"), _checks.number(beta, "beta"))


def concentration_score(keys) -> float:
    """Mean off-diagonal cosine of the keys' directions: 1 identical, 0 orthogonal. keys is
    [n_rows, head_dim], or [..., n_rows, head_dim] for the mean over heads."""
    return _native.concentration_score(np.asarray(keys))
