"""Acceptance models in a known state, for the drafting-policy tests."""
from __future__ import annotations

import torch

from exactspec.engine.policy import AcceptanceModel


def acceptance_at_rate(alpha: float, n: int = 3000) -> AcceptanceModel:
    """An acceptance model that has seen `n` verdicts at confidence 1, a fraction `alpha` accepted, every one
    after an accepted position (so the first-position and continuation rates are both ~alpha)."""
    m = AcceptanceModel()
    c = torch.full((n,), 1.0)
    m.see(c)
    m.observe(c, torch.arange(n) < round(alpha * n), later=[True] * n)
    return m
