"""The audit's verdicts and the error rates they state.

**The family of tests.** Every tested token gives one PIT value (:mod:`exactspec.audit.laws`); under exact sampling
they are independent uniforms. One audit runs m Kolmogorov–Smirnov tests of uniformity: all tokens pooled, the
tokens of each output position (faults of speculation live at positions after the first), and, when several
sampling settings were mixed, the tokens of each setting (faults in per-request values spread over a batch).
The audit's p-value is Bonferroni's, ``min(1, m · min p_i)``, so the chance that an exact engine is called
``not exact`` is at most α whatever the tests' dependence.

**Verdicts.**
- ``not exact``: the family rejects at α (default 0.001), or a token the law gives probability 0 was sampled.
- ``exact``: it does not, and the pooled test was large enough: with probability at least ``POWER`` it would have
  rejected any engine whose pooled PIT law is at KS distance ≥ ``tolerance`` from uniform. In words: if, for some
  share m, the likeliest tokens making up m of each position's probability came out with a frequency off m by
  ``tolerance`` or more, the audit would have said so. (A temperature 10% off, on a language model's laws, is
  well above 0.03; the vLLM fault of docs/audit.md is above 0.3.) The distance it can see, ``detectable``, is the
  KS critical value at α/m plus the Dvoretzky–Kiefer–Wolfowitz bound on the sample's own error at 1 − POWER:
  ``k(α/m, n) + sqrt(ln(2/(1-POWER))/(2n))``.
- ``inconclusive``: it does not reject, and ``detectable > tolerance``: more samples are needed.

**Against a control** (the same engine with speculation off): both sets of PIT values are made with the same local
law, so a deviation both share (an engine serving bfloat16, other kernels) cancels; a two-sample KS test asks
whether speculation changed the law, with its own detectable distance (the same construction, two DKW terms).

**Greedy** (T = 0): the engine's tokens against the target's argmax after the engine's own prefix; a difference
at a near tie (margin below ``near_tie`` logits) is numerics' and makes the verdict ``inconclusive``, one with a
wider margin is ``not exact``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

POWER = 0.95  # the detection probability the verdict `exact` promises against a deviation of `tolerance`
DEFAULT_ALPHA = 0.001  # the family's false-alarm rate
DEFAULT_TOLERANCE = 0.03  # the KS distance `exact` must be able to see (4 × 600 × 8 tokens see about 0.026)
NEAR_TIE = 0.05  # logits: a greedy flip below this margin is read as numerics (ggml / bf16 round at ~1e-3–1e-2)


@dataclass
class KSTest:
    name: str
    n: int
    statistic: float
    p_value: float


def ks_uniform(name: str, values: np.ndarray) -> KSTest:
    from scipy.stats import kstest

    if len(values) == 0:
        return KSTest(name, 0, 0.0, 1.0)
    r = kstest(values, "uniform")
    return KSTest(name, len(values), float(r.statistic), float(r.pvalue))


def ks_critical(alpha: float, n: int) -> float:
    """The one-sample KS distance rejected at level alpha with n values."""
    from scipy.stats import kstwo

    return float(kstwo.ppf(1.0 - alpha, n))


def dkw(n: int, power: float = POWER) -> float:
    """Dvoretzky–Kiefer–Wolfowitz: the empirical CDF of n values is within this of the true CDF with
    probability ``power``."""
    return math.sqrt(math.log(2.0 / (1.0 - power)) / (2.0 * n))


def detectable(alpha_each: float, n: int, power: float = POWER) -> float:
    """The KS distance from uniform that the pooled test detects with probability ≥ power (module docstring)."""
    if n == 0:
        return 1.0
    return min(1.0, ks_critical(alpha_each, n) + dkw(n, power))


def family(values: np.ndarray,  # [n] PIT values
           positions: np.ndarray,  # [n] output position of each value (0 = the first new token)
           settings: np.ndarray | None = None,  # [n] index of each value's sampling setting
           setting_names: list[str] | None = None) -> list[KSTest]:
    """The m KS tests of one audit (module docstring), pooled first."""
    tests = [ks_uniform("all tokens", values)]
    for k in np.unique(positions):
        tests.append(ks_uniform(f"position {int(k) + 1}", values[positions == k]))
    if settings is not None and len(np.unique(settings)) > 1:
        for g in np.unique(settings):
            name = setting_names[int(g)] if setting_names else f"setting {int(g)}"
            tests.append(ks_uniform(name, values[settings == g]))
    return tests


def law_verdict(tests: list[KSTest], alpha: float, tolerance: float, impossible: int = 0) -> dict:
    """The verdict of a family of tests (module docstring)."""
    m = len(tests)
    p = min(1.0, m * min(t.p_value for t in tests)) if tests else 1.0
    if impossible:
        p = 0.0
    n = tests[0].n if tests else 0
    see = detectable(alpha / max(m, 1), n)
    if p < alpha:
        verdict = "not exact"
    elif see <= tolerance:
        verdict = "exact"
    else:
        verdict = "inconclusive"
    return {"verdict": verdict, "p_value": p, "alpha": alpha, "tests": m, "tokens_tested": n,
            "impossible_tokens": int(impossible), "detectable_ks_distance": see, "tolerance": tolerance,
            "power": POWER}


def two_sample(a: np.ndarray, b: np.ndarray, alpha: float, tolerance: float) -> dict:
    """Did speculation change the law? Two-sample KS of the engine's PIT values against the control's."""
    from scipy.stats import ks_2samp

    if len(a) == 0 or len(b) == 0:
        return {"verdict": "inconclusive", "two_sample_p": 1.0, "detectable_ks_distance": 1.0}
    r = ks_2samp(a, b, method="asymp")  # exact is slow and warns past a few thousand values
    n, m = len(a), len(b)
    crit = math.sqrt(-math.log(alpha / 2.0) / 2.0 * (n + m) / (n * m))  # the asymptotic critical distance
    half = 1.0 - (1.0 - POWER) / 2.0  # both samples' errors within bounds together with probability POWER
    see = min(1.0, crit + dkw(n, half) + dkw(m, half))
    p = float(r.pvalue)
    verdict = "not exact" if p < alpha else ("exact" if see <= tolerance else "inconclusive")
    return {"verdict": verdict, "two_sample_p": p, "statistic": float(r.statistic), "detectable_ks_distance": see}


def greedy_verdict(mismatches: list[dict], near_tie: float = NEAR_TIE) -> str:
    """``exact`` when the engine's greedy tokens equal the target's, ``inconclusive`` when every difference is at a
    near tie, else ``not exact``."""
    if not mismatches:
        return "exact"
    return "inconclusive" if all(m["margin"] <= near_tie for m in mismatches) else "not exact"
