"""exactspec: exact speculative decoding, with its mathematics made executable.

Public API, imported lazily so that `exactspec explain` starts fast. The code lives in sub-packages, one per
stage of the data path (docs/ARCHITECTURE.md is the map); every public name is also here, flat:

- verification/ (pure tensors): probs_from_logits, sample_from_probs, verify, Verdict, verify_logits,
  verify_candidates, verify_tree, TokenTree, TreeVerdict
- speed/ (the mathematics of speed): acceptance_rate, expected_tokens, walltime_speedup, optimal_gamma,
  speedup_limit, ops_factor, speculation_helps, mixed_length_speedup, end_to_end_speedup, predict,
  expected_tokens_tree, optimal_tree, expected_accepted_token_rule, expected_accepted_block,
  multi_draft_acceptance, CostModel, GenerationStats
- engine/ (the loop): SpeculativeGenerator, GenerationOutput, StreamStep, GenerationStream,
  DraftModelDrafter, PromptLookupDrafter
- pairs/ (shipped models): load_pair ("stdlib" = the demo pair, "smollm2"; backend="llamacpp"), load_demo_pair,
  draft_in_dtype
- backends/ (how a model runs): LlamaCppLM, a GGUF file on llama.cpp (pip install 'exactspec[llamacpp]')
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "probs_from_logits": "verification.sampling",
    "sample_from_probs": "verification.sampling",
    "verify": "verification.rules",
    "Verdict": "verification.rules",
    "verify_logits": "verification.rules",
    "verify_candidates": "verification.candidates",
    "verify_tree": "verification.candidates",
    "TokenTree": "verification.candidates",
    "TreeVerdict": "verification.candidates",
    "acceptance_rate": "speed.speedup",
    "expected_tokens": "speed.speedup",
    "walltime_speedup": "speed.speedup",
    "optimal_gamma": "speed.speedup",
    "speedup_limit": "speed.speedup",
    "ops_factor": "speed.speedup",
    "mixed_length_speedup": "speed.speedup",
    "end_to_end_speedup": "speed.speedup",
    "predict": "speed.prediction",
    "speculation_helps": "speed.speedup",
    "expected_tokens_tree": "speed.treemath",
    "optimal_tree": "speed.treemath",
    "expected_accepted_token_rule": "speed.acceptance",
    "expected_accepted_block": "speed.acceptance",
    "multi_draft_acceptance": "speed.acceptance",
    "CostModel": "speed.costmodel",
    "SpeculativeGenerator": "engine.decoding",
    "GenerationOutput": "engine.decoding",
    "GenerationStats": "speed.stats",
    "StreamStep": "engine.decoding",
    "GenerationStream": "engine.decoding",
    "DraftModelDrafter": "engine.drafters",
    "PromptLookupDrafter": "engine.drafters",
    "load_demo_pair": "pairs.stdlib",
    "load_pair": "pairs.load",
    "draft_in_dtype": "pairs.load",
    "LlamaCppLM": "backends.llamacpp",
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
