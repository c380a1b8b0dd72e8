"""Each engine's HTTP dialect: how to recognise it, the request that samples from a token-id prompt with the
settings the audit models (and neutral values for everything else), where the sampled ids come back, which
counters it keeps.

- vLLM (OpenAI-compatible server): ``POST /v1/completions`` with ``prompt`` a list of ids and
  ``return_token_ids: true``; the ids come back in ``choices[0].token_ids``. ``GET /version`` answers
  ``{"version": ...}``. Counters ``vllm:spec_decode_*`` on ``/metrics``.
- llama.cpp's server: ``POST /completion`` with ``prompt`` a list of ids and ``return_tokens: true``; the ids come
  back in ``tokens`` (a token-id prompt is used as it is, no BOS added). ``GET /props`` answers with
  ``default_generation_settings``. Counters ``llamacpp:spec_decode_*`` on ``/metrics`` (with ``--metrics``). Its
  default sampler is not the plain law (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8, and a GGUF file may set
  others through its ``general.sampling.*`` keys): every setting of its chain is sent explicitly
  (``common/sampling.cpp``, ``tools/server``).
"""
from __future__ import annotations

from dataclasses import dataclass

from exactspec.audit.laws import LAWS, Settings

ENGINES = ("vllm", "llamacpp")
REPEAT_LAST_N = 64  # llama.cpp's penalty window: the audit sends it, so the law it models is the one sampled


@dataclass(frozen=True)
class Dialect:
    name: str
    path: str  # the completion endpoint
    bans_eog_on_ignore_eos: bool  # llama.cpp's ignore_eos removes end tokens from the law; vLLM's does not
    penalty_window: int | None  # tokens a repetition penalty looks back over (None: prompt and output)

    @property
    def law(self):
        return LAWS[self.name]

    def request(self, model: str | None, prompt: list[int], max_tokens: int, s: Settings, seed: int) -> dict:
        if self.name == "vllm":
            return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": s.temperature,
                    "top_k": s.top_k if s.top_k > 0 else -1, "top_p": s.top_p, "min_p": s.min_p,
                    "repetition_penalty": s.repetition_penalty, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                    "seed": seed, "ignore_eos": True, "return_token_ids": True, "skip_special_tokens": False,
                    "n": 1, "stream": False}
        return {"prompt": prompt, "n_predict": max_tokens, "temperature": s.temperature, "top_k": s.top_k,
                "top_p": s.top_p, "min_p": s.min_p, "typical_p": 1.0, "repeat_penalty": s.repetition_penalty,
                "repeat_last_n": REPEAT_LAST_N, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                "dry_multiplier": 0.0, "xtc_probability": 0.0, "top_n_sigma": -1.0, "mirostat": 0,
                "dynatemp_range": 0.0,
                # the chain's order, sent too: a server started with --samplers, or a GGUF's
                # general.sampling.sequence, would otherwise reorder what the law assumes
                "samplers": ["penalties", "top_k", "top_p", "min_p", "temperature"],
                "seed": seed, "ignore_eos": True, "return_tokens": True, "cache_prompt": True, "stream": False}

    def tokens(self, body: dict) -> list[int] | None:
        """The sampled ids of one response, or None when the server did not return them."""
        try:
            ids = body["choices"][0]["token_ids"] if self.name == "vllm" else body["tokens"]
        except (KeyError, IndexError, TypeError):
            return None
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            return None
        return ids


DIALECTS = {
    "vllm": Dialect("vllm", "/v1/completions", False, None),
    "llamacpp": Dialect("llamacpp", "/completion", True, REPEAT_LAST_N),
}

NO_IDS = {
    "vllm": "it returned no token ids (vLLM returns them with \"return_token_ids\": true since 0.10; is this an "
            "older vLLM, or not vLLM?)",
    "llamacpp": "it returned no token ids (llama.cpp's server returns them with \"return_tokens\": true; is this "
                "an older llama-server?)",
}


def detect(get) -> tuple[str, str | None]:
    """``(engine, served model name)`` from a server's own pages; ``get(path)`` returns parsed JSON or None.

    llama.cpp's server answers ``/props`` with its generation settings; vLLM answers ``/version``."""
    props = get("/props")
    if isinstance(props, dict) and "default_generation_settings" in props:
        return "llamacpp", _first_model(get("/v1/models"))
    version = get("/version")
    models = get("/v1/models")
    if isinstance(version, dict) and "version" in version:
        return "vllm", _first_model(models)
    owners = {m.get("owned_by") for m in (models or {}).get("data", []) if isinstance(m, dict)} \
        if isinstance(models, dict) else set()
    if "vllm" in owners:
        return "vllm", _first_model(models)
    raise ValueError("cannot tell which engine serves this URL (no llama.cpp /props, no vLLM /version); "
                     "name it with --engine vllm|llamacpp")


def _first_model(models) -> str | None:
    try:
        return models["data"][0]["id"]
    except (KeyError, IndexError, TypeError):
        return None
