"""The law an engine samples a token from, at the settings a request sends, and the probability-integral
transform (PIT) that turns every sampled token into one uniform draw when the engine is exact.

Each engine defines its own law; the audit models each as its source does (float64, numpy):

- **vLLM** (V1 sampler, ``vllm/v1/sample/sampler.py``): penalties on the raw logits (repetition over the prompt's
  and the output's tokens: a seen token's positive logit divided by r, a negative one multiplied), then the
  temperature, then min-p (on the tempered probabilities), then top-k, then top-p. ``ignore_eos`` only keeps
  generating past an end token: the law keeps it.
- **llama.cpp's server** (``common/sampling.cpp``'s default chain): a logit bias (``ignore_eos`` is a −inf bias on
  the end-of-generation tokens, so the law has them removed), penalties over the last ``repeat_last_n`` tokens
  (64), top-k, top-p, min-p, and the temperature *last*: top-p and min-p see the untempered probabilities.

Neutral values (top-k 0, top-p 1, min-p 0, penalty 1) make every filter a no-op, so at those settings both
engines sample ``softmax(logits / T)``. Temperature 0 is the argmax (lowest id among ties).

**The PIT in order of probability.** At a position with law p, order the vocabulary by p (descending, ties by
id); the token x drawn there maps to ``F(before x) + U·p(x)`` with U uniform. Under exact sampling these values
are independent uniforms, whatever the law and whatever the prefix (each is uniform given everything before
it). Ordering by probability makes the test see the faults that matter: a law that is too sharp (temperature
too low, a filter too strict) piles values near 0, one too flat near 1, mass moved off the likeliest tokens
shows as a step of that size. A token with p(x) = 0 is impossible under the law: it is counted apart.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Settings", "LAWS", "vllm_law", "llamacpp_law", "biased_logits", "pit"]

_NEG = -np.inf


@dataclass(frozen=True)
class Settings:
    """One request's sampling settings, as the engine's API takes them (neutral values switch a filter off)."""

    temperature: float
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    min_p: float = 0.0  # 0: off
    repetition_penalty: float = 1.0  # 1: off

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def label(self) -> str:
        parts = [f"T={self.temperature:g}"]
        parts += [f"top-k={self.top_k}"] if self.top_k else []
        parts += [f"top-p={self.top_p:g}"] if self.top_p < 1 else []
        parts += [f"min-p={self.min_p:g}"] if self.min_p > 0 else []
        parts += [f"rep={self.repetition_penalty:g}"] if self.repetition_penalty != 1 else []
        return " ".join(parts)


# ------------------------------------------------------------------------------ filters on logits [N, V]
def _softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(axis=-1, keepdims=True)
    e = np.exp(z - m)
    return e / e.sum(axis=-1, keepdims=True)


def _penalise(z: np.ndarray, seen: np.ndarray, r: float) -> np.ndarray:
    """Repetition penalty (both engines, the CTRL form): a seen token's logit / r if positive, · r if not."""
    return np.where(seen, np.where(z > 0, z / r, z * r), z)


def _top_k(z: np.ndarray, k: int) -> np.ndarray:
    if k <= 0 or k >= z.shape[-1]:
        return z
    kth = np.partition(z, -k, axis=-1)[:, -k][:, None]  # [N, 1] the k-th largest logit
    return np.where(z >= kth, z, _NEG)


def _top_p(z: np.ndarray, p: float) -> np.ndarray:
    """Keep the likeliest tokens until their mass reaches p (at least one), on softmax(z)."""
    if p >= 1.0:
        return z
    probs = _softmax(z)
    order = np.argsort(-probs, axis=-1, kind="stable")  # [N, V]
    sorted_p = np.take_along_axis(probs, order, axis=-1)
    before = np.cumsum(sorted_p, axis=-1) - sorted_p  # mass strictly before each token in the order
    keep_sorted = before < p
    keep_sorted[:, 0] = True
    keep = np.empty_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    return np.where(keep, z, _NEG)


def _min_p(z: np.ndarray, m: float) -> np.ndarray:
    """Keep tokens with probability >= m · the largest (on softmax(z)): logit >= max + log m."""
    if m <= 0.0:
        return z
    return np.where(z >= z.max(axis=-1, keepdims=True) + np.log(m), z, _NEG)


def _argmax_law(z: np.ndarray) -> np.ndarray:
    out = np.zeros_like(z)
    out[np.arange(len(z)), z.argmax(axis=-1)] = 1.0
    return out


def biased_logits(logits: np.ndarray, s: Settings, seen, banned) -> np.ndarray:
    """Both engines begin alike: banned tokens (llama.cpp's ignore_eos) at -inf, then the repetition penalty."""
    z = np.asarray(logits, dtype=np.float64)
    if banned is not None and banned.any():
        z = np.where(banned, _NEG, z)
    if s.repetition_penalty != 1.0:
        z = _penalise(z, seen, s.repetition_penalty)
    return z


# ------------------------------------------------------------------------------------------ the laws
def vllm_law(logits: np.ndarray,  # [N, V] the target's logits at N positions
             s: Settings,
             seen: np.ndarray | None = None,  # [N, V] bool: in the prompt or the output so far
             banned: np.ndarray | None = None) -> np.ndarray:  # [V] bool; vLLM's ignore_eos bans nothing
    """vLLM's law at one request's settings: penalties, temperature, min-p, top-k, top-p. ``[N, V]`` float64."""
    z = biased_logits(logits, s, seen, banned)
    if s.greedy:
        return _argmax_law(z)
    z = _min_p(z / s.temperature, s.min_p)
    return _softmax(_top_p(_top_k(z, s.top_k), s.top_p))


def llamacpp_law(logits: np.ndarray,  # [N, V]
                 s: Settings,
                 seen: np.ndarray | None = None,  # [N, V] bool: in the last repeat_last_n tokens
                 banned: np.ndarray | None = None) -> np.ndarray:  # [V] bool: EOG tokens under ignore_eos
    """llama.cpp's server law: bias, penalties, top-k, top-p, min-p, then the temperature. ``[N, V]`` float64."""
    z = biased_logits(logits, s, seen, banned)
    if s.greedy:
        return _argmax_law(z)
    z = _min_p(_top_p(_top_k(z, s.top_k), s.top_p), s.min_p)
    return _softmax(z / s.temperature)


LAWS = {"vllm": vllm_law, "llamacpp": llamacpp_law}


# ------------------------------------------------------------------------------------------------ PIT
def pit(probs: np.ndarray,  # [N, V] each row a law
        tokens: np.ndarray,  # [N] the token drawn from each row's law
        u: np.ndarray,  # [N] uniforms, independent of everything else
        chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Randomised PIT in order of probability (module docstring): ``(values [N], p_of_token [N])``.

    A token of probability 0 gets the value of where it would stand; the caller counts it as impossible."""
    n = len(tokens)
    out, px_all = np.empty(n), np.empty(n)
    ids = np.arange(probs.shape[1])
    for a in range(0, n, chunk):
        p, x = probs[a:a + chunk], tokens[a:a + chunk]
        px = p[np.arange(len(x)), x][:, None]  # [n, 1]
        ahead = (p > px) | ((p == px) & (ids[None, :] < x[:, None]))  # [n, V] ordered before x
        before = np.where(ahead, p, 0.0).sum(axis=1)
        out[a:a + chunk] = np.minimum(before + u[a:a + chunk] * px[:, 0], 1.0)
        px_all[a:a + chunk] = px[:, 0]
    return out, px_all
