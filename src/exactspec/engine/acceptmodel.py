"""What gamma="auto" knows of acceptance: :class:`AcceptanceModel` (P(accepted | a bin of the draft's
confidence), learned online) and :class:`DraftingState` (what a policy carries from one run to the next).
The policy that prices with them is :mod:`exactspec.engine.policy`.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import torch

__all__ = ["AcceptanceModel", "DraftingState"]

# Bin edges over the draft's top probability; finer near 1, where a good draft spends most positions.
_EDGES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.995)


def _floats(x) -> list:
    return x.tolist() if isinstance(x, torch.Tensor) else list(x)


@dataclass
class AcceptanceModel:
    """P(accepted | confidence bin), from decayed counts; every bin shrunk towards the pooled rate.

    `weight` pseudo-observations of the pooled rate per bin; `decay` per observed step, so that old
    evidence fades when the text changes (a new prompt, code after prose). `seen` is how often each bin
    occurred at all (drafted or not), which weighs the expected acceptance of a position not drafted yet.
    Plain Python floats: the policy asks it a few rows at a time, between forward passes, where a
    handful of tiny tensor ops would cost more than the arithmetic.
    """

    prior: float = 0.7
    weight: float = 2.0
    decay: float = 0.995
    n: list = field(default_factory=lambda: [0.0] * len(_EDGES))
    a: list = field(default_factory=lambda: [0.0] * len(_EDGES))
    seen: list = field(default_factory=lambda: [0.0] * len(_EDGES))
    later_n: float = 0.0  # decayed verdicts of positions reached after an accepted one (position >= 2) ...
    later_a: float = 0.0  # ... and how many of them were accepted

    def __post_init__(self):
        self._rates: list | None = None

    @staticmethod
    def bins(confidence) -> list[int]:
        """Bin index of each confidence (a tensor or a list of floats)."""
        return [max(bisect.bisect_right(_EDGES, c) - 1, 0) for c in _floats(confidence)]

    @property
    def observations(self) -> float:
        return sum(self.n)

    @property
    def pooled(self) -> float:
        """Acceptance over all bins, shrunk towards `prior` with `weight` pseudo-observations."""
        return (sum(self.a) + self.weight * self.prior) / (sum(self.n) + self.weight)

    def rates(self) -> list[float]:
        """Acceptance estimate per bin (cached until the next observation)."""
        if self._rates is None:
            pooled = self.pooled
            self._rates = [(a + self.weight * pooled) / (n + self.weight) for a, n in zip(self.a, self.n)]
        return self._rates

    def predict(self, confidence) -> list[float]:
        """Acceptance estimate of each confidence."""
        rates = self.rates()
        return [rates[b] for b in self.bins(confidence)]

    def mean(self) -> float:
        """Expected acceptance of a position not drafted yet: bins weighed by how often they occur."""
        total = sum(self.seen)
        return self.pooled if total <= 0 else sum(s * r for s, r in zip(self.seen, self.rates())) / total

    def best(self) -> float:
        """The highest estimate among the bins that occurred (the pooled rate before any did)."""
        rates = self.rates()
        return max((r for s, r in zip(self.seen, rates) if s > 0), default=self.pooled)

    def uncertainty(self, z: float = 1.0) -> tuple[float, float]:
        """`z` standard errors of the pooled rate and of the continuation rate: sqrt(p (1 - p) / (n + weight
        + 1)) each, the spread of a Beta posterior with n verdicts behind it. Large while few positions
        (or few positions after an accepted one) have been verified. The policy adds them to its rates
        (optimism under uncertainty), so that a few unlucky first verdicts can neither turn drafting off nor
        keep drafts short for good: a position never reached is never measured, so only optimism makes
        the policy reach it and find out."""
        def spread(p: float, n: float) -> float:
            return z * math.sqrt(p * (1.0 - p) / (n + self.weight + 1.0))

        return spread(self.pooled, self.observations), spread(self.continuation(), self.later_n)

    def continuation(self) -> float:
        """Acceptance of a position reached after an accepted one (position >= 2), shrunk towards the pooled
        rate. Acceptance runs in streaks (easy text is easy for several tokens), so it is above the pooled
        rate, which the first position pulls down: pricing later positions at the pooled rate stopped
        steps too early (held-out greedy: 55 of 114 steps stopped at 2 where γ=4 ran 8% faster)."""
        return (self.later_a + self.weight * self.pooled) / (self.later_n + self.weight)

    def see(self, confidence) -> None:
        for b in self.bins(confidence):
            self.seen[b] += 1.0

    def observe(self, confidence, accepted, later=None) -> None:
        """`confidence [N]` of positions that were verified and reached, `accepted [N]` bool, `later [N]` bool:
        the position came after an accepted one (default: none did)."""
        d = self.decay
        self.n, self.a, self.seen = [v * d for v in self.n], [v * d for v in self.a], [v * d for v in self.seen]
        self.later_n, self.later_a = self.later_n * d, self.later_a * d
        accepted = _floats(accepted)
        self.count(confidence, accepted, [False] * len(accepted) if later is None else later)

    def count(self, confidence, accepted, later, weight: float = 1.0, seen: bool = False) -> None:
        """Add verdicts without decay, `weight` pseudo-observations each: `accepted [N]` (bools, or expected
        acceptances in [0, 1]), `later [N]` (whether, or the chance that, the position came after an accepted
        one); `seen`: count them as occurrences of their bins too (:meth:`see`). :meth:`observe` counts a
        run's verdicts; :mod:`exactspec.engine.promptprior` the prompt's expected ones."""
        for b, ok, lat in zip(self.bins(confidence), _floats(accepted), later):
            self.n[b] += weight
            self.a[b] += weight * float(ok)
            if seen:
                self.seen[b] += weight
            if lat:
                self.later_n += weight * float(lat)
                self.later_a += weight * float(lat) * float(ok)
        self._rates = None


@dataclass
class DraftingState:
    """What an AdaptivePolicy carries from one run to the next: the acceptance model and the probing state
    (plain steps since the last probe, and the current gap between probes)."""

    model: AcceptanceModel = field(default_factory=AcceptanceModel)
    probe_gap: int = 4
    since_probe: int = 0
    tokens: float = 0.0  # decayed tokens per row emitted by drafting steps ...
    seconds: float = 0.0  # ... and their price under the cost model: the rate the policy achieves
