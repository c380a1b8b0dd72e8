"""Backends: how a model is run (prefill, k new tokens -> logits, keep the first n cached)."""
