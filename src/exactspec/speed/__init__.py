"""The mathematics of speed: expected tokens, speedups, acceptance, the cost model and predictions."""
