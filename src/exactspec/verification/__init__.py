"""Verification: the exact acceptance rules and their sampling, on tensors only (no models)."""
