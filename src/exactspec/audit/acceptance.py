"""Acceptance left on the table: the engine's own rule and exactspec's best exact rule, replayed on the very texts
the engine sampled, beside what the engine's counters say it accepted.

The texts an exact engine returns are draws from the target's law, so the loop's expected acceptance on them is
:class:`exactspec.deploy.offline.OfflineAcceptance`'s replay (its module docstring has the argument): at each
written position t with law p_t, the draft's law q_t (at the same settings) and the text's token x_t,

- **greedy drafts** (vLLM's default ``draft_sample_method="greedy"``; llama.cpp's server, which keeps a draft while
  it matches the target's own sample): the draft proposes d_t = argmax q_t; kept iff the text says d_t
  (weight ``[x_t = d_t]``), with probability ``p_t(d_t)``;
- **sampled drafts** with the p/q test (vLLM's ``"probabilistic"``, exactspec's token rule): weight
  ``min(1, q_t(x_t)/p_t(x_t))``, acceptance ``Σ min(p_t, q_t)``.

exactspec's best exact rule is the better of the two on these texts (it ships both). Each rule's ``tokens_per_step``
is the steady state at γ, from its per-position rates; ``mean_acceptance_length_capped`` counts drafts capped where
each text ends. What the engine's counters should read on these requests, ``counters_expected``: llama.cpp's server
caps drafts at the tokens left (the capped figure), vLLM drafts γ to the end (the steady state). The speedup each
rule is worth comes from :func:`exactspec.speed.speedup.walltime_speedup` at the draft's cost over the target's.
"""
from __future__ import annotations

import numpy as np

RULES = ("greedy", "probabilistic")


class Tally:
    """Per-text weights and acceptances of both draft rules, accumulated as the law pass goes."""

    def __init__(self):
        self.w = {r: [] for r in RULES}
        self.alpha = {r: [] for r in RULES}

    def add(self, p: np.ndarray,  # [n, V] the engine's law at the text's n positions
            q: np.ndarray,  # [n, V] the draft's law there, at the same settings
            x: np.ndarray) -> None:  # [n] the text's tokens
        # the first token comes from the prompt's own pass in both engines: nothing is drafted for it
        p, q, x = p[1:], q[1:], x[1:]
        if len(x) == 0:
            return
        rows = np.arange(len(x))
        d = q.argmax(axis=1)  # [n] greedy drafts
        self.w["greedy"].append((d == x).astype(float))
        self.alpha["greedy"].append(p[rows, d])
        px, qx = p[rows, x], q[rows, x]
        self.w["probabilistic"].append(np.where(px > 0, np.minimum(1.0, qx / np.maximum(px, 1e-300)), 1.0))
        self.alpha["probabilistic"].append(np.minimum(p, q).sum(axis=1))

    def replay(self, rule: str, gamma: int) -> dict:
        from exactspec.deploy.offline import OfflineAcceptance, rows_from_text

        rows = rows_from_text(self.w[rule], self.alpha[rule], gamma)
        rep = OfflineAcceptance(False, "draft_model", gamma, rows).replay(gamma)
        rates = rep.per_position_acceptance
        return {"rule": rule, "per_position_acceptance": rates,
                "per_token_acceptance": float(np.mean(np.concatenate(self.alpha[rule]))),
                "tokens_per_step": _tokens_per_step(rates, gamma),
                # drafts capped where each text ends, as llama.cpp's server caps them at the tokens left
                "mean_acceptance_length_capped": rep.mean_acceptance_length}


def _tokens_per_step(rates: list[float], gamma: int) -> float:
    """1 + Σ_i Π_{j≤i} a_j over γ positions; positions never reached take the smallest observed rate (as
    :func:`exactspec.deploy.enginemetrics.extrapolate` does)."""
    from exactspec.deploy.enginemetrics import extrapolate
    from exactspec.speed.speedup import expected_tokens

    if not rates:
        return 1.0
    full, _ = extrapolate(rates, gamma)
    return float(expected_tokens(np.array(full), gamma))


def compare(tally: Tally, engine: str, draft_method: str, gamma: int, cost: float, counters: dict | None) -> dict:
    """The acceptance block of the report: the engine's rule, exactspec's best, the engine's counters."""
    from exactspec.deploy.enginemetrics import extrapolate
    from exactspec.speed.speedup import walltime_speedup

    engine_rule = "probabilistic" if (engine == "vllm" and draft_method == "probabilistic") else "greedy"
    rules = {r: tally.replay(r, gamma) for r in RULES}
    best = max(RULES, key=lambda r: rules[r]["tokens_per_step"])
    for r in rules.values():
        full = r["per_position_acceptance"] or [0.0]
        r["predicted_speedup"] = float(walltime_speedup(np.array(extrapolate(full, gamma)[0]), gamma, cost))
    out = {"gamma": gamma, "draft_cost": cost, "engine_rule": engine_rule,
           "engine_rule_expected": rules[engine_rule], "best_exact": rules[best],
           "tokens_per_step_gain": rules[best]["tokens_per_step"] / rules[engine_rule]["tokens_per_step"],
           "counters_expected": rules[engine_rule]["mean_acceptance_length_capped" if engine == "llamacpp"
                                                   else "tokens_per_step"],
           "engine": counters}
    return out
