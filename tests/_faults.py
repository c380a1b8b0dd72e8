"""Subtle faults for the power checks of the exactness tests.

Each fault replaces a formula function on :mod:`exactspec.verification.rules`, the one place where verify, verify_logits,
verify_candidates, the tree walk, the engine (through verify) and the enumeration in exactspec.verification.exact all
look it up. So one patch reaches every level, and a test level "has power" when it fails under the patch.

- ``inflated_acceptance``: every acceptance probability 5% too high (min(1, 1.05 a)): the token rule's and
  the multi-candidate rule's min(1, p/q) and block verification's coins h_i.
- ``residual_09q``: the residual max(w p - 0.9 q, 0) instead of max(w p - q, 0).
"""
from __future__ import annotations

from exactspec.verification import rules


def inflated_acceptance(monkeypatch, factor: float = 1.05) -> None:
    token, block = rules.token_accept_prob, rules.block_accept_probs
    monkeypatch.setattr(rules, "token_accept_prob", lambda p, q: (token(p, q) * factor).clamp(max=1.0))
    monkeypatch.setattr(rules, "block_accept_probs", lambda *a: (block(*a) * factor).clamp(max=1.0))


def residual_09q(monkeypatch) -> None:
    def residual(p, q, weight=1.0, out=None):
        return (p * weight - 0.9 * q).clamp(min=0.0)  # a fresh tensor: callers use the return value
    monkeypatch.setattr(rules, "residual", residual)


FAULTS = {"acceptance+5%": inflated_acceptance, "residual p-0.9q": residual_09q}


def apply(monkeypatch, name: str) -> None:
    FAULTS[name](monkeypatch)

