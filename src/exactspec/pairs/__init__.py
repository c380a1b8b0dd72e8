"""The shipped pairs (stdlib, SmolLM2) and the model formats they use (the feature draft)."""
