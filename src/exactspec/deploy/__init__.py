"""Deployment tools: offline acceptance, plans for vLLM / SGLang, cost profiles, engine metrics."""
