"""The engine: one speculative decoding loop over models, its drafters and drafting policies."""
