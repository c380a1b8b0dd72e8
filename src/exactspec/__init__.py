"""exactspec: exact speculative decoding, with its mathematics made executable.

Public API (imported lazily so that `exactspec explain` starts fast):

- sampling:   probs_from_logits
- rules:      verify, Verdict, verify_logits (module `rules`, so that `exactspec.verify` is always the function)
- candidates: verify_candidates, verify_tree, TokenTree
- speedup:    acceptance_rate, expected_tokens, walltime_speedup, optimal_gamma,
              speedup_limit, ops_factor, speculation_helps, expected_tokens_tree, optimal_tree
- costmodel:  CostModel
- acceptance: expected_accepted_token_rule, expected_accepted_block, multi_draft_acceptance
- decoding:   SpeculativeGenerator
- demo:       load_demo_pair
- pairs:      load_pair ("stdlib" = the demo pair, "smollm2" = SmolLM2-135M-Instruct and its distilled draft),
              draft_in_dtype (a draft cast without touching what it shares with its target)
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "probs_from_logits": "sampling",
    "sample_from_probs": "sampling",
    "verify": "rules",
    "Verdict": "rules",
    "verify_logits": "rules",
    "verify_candidates": "candidates",
    "verify_tree": "candidates",
    "TokenTree": "candidates",
    "TreeVerdict": "candidates",
    "acceptance_rate": "speedup",
    "expected_tokens": "speedup",
    "walltime_speedup": "speedup",
    "optimal_gamma": "speedup",
    "speedup_limit": "speedup",
    "ops_factor": "speedup",
    "mixed_length_speedup": "speedup",
    "end_to_end_speedup": "speedup",
    "predict": "prediction",
    "speculation_helps": "speedup",
    "expected_tokens_tree": "treemath",
    "optimal_tree": "treemath",
    "expected_accepted_token_rule": "acceptance",
    "expected_accepted_block": "acceptance",
    "multi_draft_acceptance": "acceptance",
    "CostModel": "costmodel",
    "SpeculativeGenerator": "decoding",
    "GenerationOutput": "decoding",
    "GenerationStats": "stats",
    "StreamStep": "decoding",
    "GenerationStream": "decoding",
    "DraftModelDrafter": "drafters",
    "PromptLookupDrafter": "drafters",
    "load_demo_pair": "demo",
    "load_pair": "pairs",
    "draft_in_dtype": "pairs",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'exactspec' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"exactspec.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
