"""Acceptance measured offline: no speculative loop, one teacher-forced pass of each model.

The target first writes continuations of the prompts (``target.generate``, greedy or sampled). Then ONE
batched forward pass of the target and one of the draft over prompt + continuation give, at every written
position t, the target's distribution p_t and the draft's q_t on the true prefix. From them:

- ``alpha_t = sum_v min(p_t(v), q_t(v))``: the chance that a draft token proposed at t is accepted by the
  token rule (greedy: ``[argmax q_t == argmax p_t]``);
- ``w_t = min(1, q_t(x_t) / p_t(x_t))`` for the written token x_t (greedy: ``[argmax q_t == x_t]``).

Why this is exact in expectation. The speculative loop's output is distributed as the target's, so it can be
read as a text x ~ p plus, given x, the loop's own coin flips. Given x, a step that starts at position s
accepts exactly m of its k drafts with probability ``w_s .. w_{s+m-1} (1 - w_{s+m})`` (all k: the product
of all k), because emitting x_s..x_{s+m} that way has probability ``prod min(p, q)(x_j) * max(p - q, 0)(x_{s+m})``
and ``max(p - q, 0) / p = 1 - w``. So the loop is a Markov chain over start positions of the written text,
and :meth:`OfflineAcceptance.replay` runs it in expectation: the expected numbers of steps reaching and
accepting each draft position, the drafted lengths, exactly what ``SpeculativeGenerator.generate`` counts
(the last factor of "accepted at position i" is replaced by its expectation alpha, which depends only on the
prefix: same mean, less noise). Greedy: w and alpha are 0/1 and the replay reproduces ``generate``'s
counts on the same text exactly.

Prompt lookup is replayed the same way: from each start the n-gram lookup over prompt + written text gives
the drafts d_j (one-hot q), so w = [x = d] and alpha = p(d).

Block verification (Sun et al. 2024) needs the draft's distributions along its own sampled chains, which
one teacher-forced pass does not see; what the pass does give is a ceiling. No valid verifier accepts i or
more tokens with probability above ``sum_{x_1..x_i} min(p(x_1..x_i), q(x_1..x_i))`` (joint distributions),
estimated here from the target's text as ``sum_v min(p_t(v), R q_t(v))`` with
``R = prod_{j<t} q_j(x_j)/p_j(x_j)`` over the chain's earlier tokens, averaged over every start position.
Block verification lies between the token rule (it never accepts less) and that ceiling.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["OfflineAcceptance", "Replay", "measure_acceptance"]


@dataclass
class Replay:
    """Expected statistics of the speculative loop at one gamma (floats: expectations, not counts).

    ``position_drafted[i]`` / ``position_accepted[i]``: steps reaching / accepting draft position i + 1;
    ``length_counts[k]``: steps drafting k tokens; ``steps``: target calls; ``tokens``: tokens written.
    """

    gamma: int
    position_drafted: np.ndarray
    position_accepted: np.ndarray
    length_counts: np.ndarray
    steps: float
    tokens: int

    @property
    def per_position_acceptance(self) -> list[float]:
        """Conditional rates for the positions ever reached (position i accepted given all before were)."""
        d, a = self.position_drafted, self.position_accepted
        return [float(a[i] / d[i]) for i in range(len(d)) if d[i] > 0]

    @property
    def drafts(self) -> float:
        """Steps that drafted at least one token (vLLM's ``num_drafts``)."""
        return float(self.length_counts[1:].sum())

    @property
    def acceptance_rate(self) -> float:
        drafted = float((np.arange(len(self.length_counts)) * self.length_counts).sum())
        return float(self.position_accepted.sum()) / drafted if drafted else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted draft tokens per draft (vLLM's definition)."""
        return 1.0 + float(self.position_accepted.sum()) / self.drafts if self.drafts else 1.0


@dataclass
class _Row:
    """One written continuation: per start s, the acceptance quantities of its drafts.

    ``w [n, K]``, ``alpha [n, K]`` (K = max_gamma; entries past ``avail[s]`` are unused), ``avail [n]``:
    drafts available from s (K for a draft model, the lookup's length for prompt lookup)."""

    w: np.ndarray
    alpha: np.ndarray
    avail: np.ndarray

    @property
    def n(self) -> int:
        return int(self.avail.shape[0])


@dataclass
class OfflineAcceptance:
    """Per-prompt acceptance quantities of one (target, drafter, sampling) setting; see the module docstring."""

    greedy: bool
    drafter: str  # "draft_model" or "prompt_lookup"
    max_gamma: int
    rows: list[_Row]
    block_reach: np.ndarray | None = None  # [max_gamma] ceiling on P(any verifier accepts >= i); sampled only
    texts: list[list[int]] = field(default_factory=list)  # the written continuations (token ids)

    @property
    def tokens(self) -> int:
        return sum(r.n for r in self.rows)

    def replay(self, gamma: int) -> Replay:
        """Expected statistics of ``generate`` at this gamma over the written texts (no EOS inside them)."""
        if isinstance(gamma, bool) or not isinstance(gamma, int) or not 1 <= gamma <= self.max_gamma:
            raise ValueError(f"gamma must be an integer in 1..{self.max_gamma}, got {gamma!r}")
        drafted, accepted = np.zeros(gamma), np.zeros(gamma)
        lengths, steps = np.zeros(gamma + 1), 0.0
        for row in self.rows:
            n = row.n
            start = np.zeros(n + 1)  # start[s]: probability that a step starts at written position s
            start[0] = 1.0
            for s in range(n):
                pi = start[s]
                if pi == 0.0:
                    continue
                steps += pi
                # generate drafts min(gamma, tokens left - 1): a step never overshoots the text
                k = min(gamma, int(row.avail[s]), n - s - 1)
                lengths[k] += pi
                if k == 0:
                    start[s + 1] += pi
                    continue
                w = row.w[s, :k]
                reach = np.concatenate(([1.0], np.cumprod(w[:-1])))  # [k] P(position i+1 reached)
                drafted[:k] += pi * reach
                accepted[:k] += pi * reach * row.alpha[s, :k]
                stop = reach * (1.0 - w)  # [k] P(exactly m accepted), m < k
                start[s + 1:s + k + 1] += pi * stop
                start[s + k + 1] += pi * reach[-1] * w[-1]
        return Replay(gamma, drafted, accepted, lengths, steps, self.tokens)

    @property
    def block_ceiling(self) -> list[float] | None:
        """Conditional rates of the ceiling on any verifier (block verification included), P(>= i) / P(>= i-1);
        None when greedy (every rule is the greedy rule) or with prompt lookup (one-hot q: block = token)."""
        if self.block_reach is None:
            return None
        reach = np.concatenate(([1.0], self.block_reach))
        return [float(reach[i + 1] / reach[i]) if reach[i] > 0 else 0.0 for i in range(len(self.block_reach))]


# ------------------------------------------------------------------------------------------ measuring
def measure_acceptance(target, tokenizer, prompts: list[str], *, draft=None, prompt_lookup: bool = False,
                       max_new_tokens: int = 64, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                       max_gamma: int = 8, ngram: int = 3, seed: int = 0, batch_size: int = 8,
                       stop_at_eos: bool = True) -> OfflineAcceptance:
    """Write continuations with the target, then measure acceptance with one teacher-forced pass per batch.

    ``draft`` (a causal LM sharing the tokenizer) or ``prompt_lookup=True``. Temperature 0 is greedy.
    ``stop_at_eos=False`` writes exactly ``max_new_tokens`` per prompt, EOS an ordinary token (as
    ``generate(eos_token_id=[])`` does).
    """
    from exactspec.drafters import PromptLookupDrafter, SamplingSpec

    if (draft is None) == (not prompt_lookup):
        raise ValueError("give a draft model or prompt_lookup=True (exactly one)")
    for name, v in (("max_new_tokens", max_new_tokens), ("max_gamma", max_gamma), ("ngram", ngram),
                    ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty strings")
    greedy = temperature == 0
    vocab = target.get_output_embeddings().weight.shape[0]
    spec = SamplingSpec(greedy=greedy, temperature=float(temperature), top_k=top_k, top_p=top_p,
                        generator=torch.Generator(), vocab_size=vocab)
    spec.probs(torch.zeros(1, 2))  # validates temperature / top_k / top_p before any model runs
    lookup = PromptLookupDrafter(max_ngram=ngram, max_draft=max_gamma) if prompt_lookup else None
    rows, texts, block = [], [], []
    for i in range(0, len(prompts), batch_size):
        enc = [tokenizer(p)["input_ids"] for p in prompts[i:i + batch_size]]
        conts = _write(target, tokenizer, enc, max_new_tokens, spec, seed + i, stop_at_eos)
        texts += conts
        got = _teacher_forced(target, draft, enc, conts, spec, max_gamma, lookup)
        rows += got[0]
        block += got[1]
    reach = None
    if block:  # mean over every start position of P(block accepts >= i), i = 1..max_gamma
        stacked = np.concatenate(block)  # [starts, max_gamma], NaN where the chain runs past the text
        reach = np.nanmean(stacked, axis=0) if np.isfinite(stacked).any() else None
    return OfflineAcceptance(greedy, "prompt_lookup" if prompt_lookup else "draft_model", max_gamma, rows,
                             reach, texts)


def _write(target, tokenizer, enc: list[list[int]], max_new: int, spec, seed: int, stop_at_eos: bool):
    """The target's own continuations (token ids, cut after the first EOS when stopping at EOS).

    Prompts are batched with left padding only under an attention kernel that masks padded query rows
    cleanly; eager attention turns fully masked rows into NaN that leaks into later layers, so there
    prompts are batched only with prompts of their own length."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    kw = dict(max_new_tokens=max_new, pad_token_id=pad, do_sample=not spec.greedy)
    if not spec.greedy:
        kw.update(temperature=spec.temperature, top_k=spec.top_k, top_p=spec.top_p)
    if not stop_at_eos:  # EOS is then an ordinary token, as with generate(eos_token_id=[]); min_new_tokens
        kw["eos_token_id"] = []  # would instead ban it, changing the target's distribution
    eager = getattr(target.config, "_attn_implementation", "eager") in (None, "eager")
    groups: dict = {}
    for b, e in enumerate(enc):
        groups.setdefault(len(e) if eager else 0, []).append(b)
    eos = set(_eos_ids(target)) if stop_at_eos else set()
    conts: list = [None] * len(enc)
    torch.manual_seed(seed)  # HF sampling draws from the global generator
    for members in groups.values():
        ids, mask = _pad([enc[b] for b in members], pad, left=True)
        with torch.inference_mode():
            out = target.generate(input_ids=ids.to(target.device), attention_mask=mask.to(target.device), **kw)
        for b, row in zip(members, out[:, ids.shape[1]:].tolist()):
            cut = next((j + 1 for j, t in enumerate(row) if t in eos), len(row))
            conts[b] = row[:cut]
    return conts


def _eos_ids(model) -> list[int]:
    e = model.generation_config.eos_token_id
    return [] if e is None else ([e] if isinstance(e, int) else list(e))


def _pad(seqs: list[list[int]], pad: int, left: bool = True):
    """(ids [B, L], mask [B, L]) padded on the left (for generate) or on the right."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, s in enumerate(seqs):
        cols = slice(width - len(s), width) if left else slice(0, len(s))
        ids[b, cols] = torch.tensor(s, dtype=torch.long)
        mask[b, cols] = 1
    return ids, mask


@torch.inference_mode()
def _logits(model, ids, mask, keep: int) -> torch.Tensor:
    """Logits of the last `keep` columns, `[B, keep, V]`. Rows are right-padded: a real token never
    attends to a pad (causality) and every query row has a real key, so no kernel sees an empty row."""
    dev = model.device
    out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), logits_to_keep=keep, use_cache=False)
    return out.logits[:, -keep:].float().cpu()


def _teacher_forced(target, draft, enc, conts, spec, max_gamma: int, lookup):
    """Per row, a :class:`_Row` (and, sampled with a draft model, block's per-start reach [n, K])."""
    full = [e + c for e, c in zip(enc, conts)]
    ids, mask = _pad(full, 0, left=False)
    # Continuation token t of row b sits at column len(prompt_b) + t and is predicted at the column before.
    first = min(len(e) for e in enc) - 1  # earliest predicting column of any row
    keep = ids.shape[1] - first
    p_logits = _logits(target, ids, mask, keep)  # [B, keep, V_target]
    q_logits = _logits(draft, ids, mask, keep) if draft is not None else None
    rows, block = [], []
    for b, (prompt, cont) in enumerate(zip(enc, conts)):
        n = len(cont)
        if n == 0:
            continue
        sl = slice(len(prompt) - 1 - first, len(prompt) - 1 - first + n)
        x = torch.tensor(cont, dtype=torch.long)  # [n]
        p = _probs(spec, p_logits[b, sl])  # [n, V] (greedy: one-hot of the argmax)
        if lookup is None:
            q = _probs(spec, q_logits[b, sl])
            rows.append(_draft_row(p, q, x, max_gamma, spec.greedy))
            if not spec.greedy:
                block.append(_block_reach(p, q, x, max_gamma))
        else:
            rows.append(_lookup_row(p, x, prompt, cont, max_gamma, lookup))
    return rows, block


def _probs(spec, logits: torch.Tensor) -> torch.Tensor:
    """`[n, V_model]` logits -> `[n, V]` probabilities, float64 (one-hot argmax when greedy)."""
    return spec.probs(logits).double()


def _windows(v: np.ndarray, k: int) -> np.ndarray:
    """`[n]` -> `[n, k]` with row s = v[s : s + k] (zero past the end)."""
    padded = np.concatenate([v, np.zeros(k)])
    return np.lib.stride_tricks.sliding_window_view(padded, k)[: len(v)].copy()


def _draft_row(p, q, x, max_gamma: int, greedy: bool) -> _Row:
    px, qx = p.gather(1, x[:, None])[:, 0], q.gather(1, x[:, None])[:, 0]  # [n]
    if greedy:  # one-hot p and q: accepted iff the draft's argmax is the written token
        w = (q.argmax(1) == x).double()
        alpha = w.clone()
    else:
        w = torch.where(px > 0, torch.clamp(qx / px.clamp(min=1e-300), max=1.0), (qx > 0).double())
        alpha = torch.minimum(p, q).sum(1)  # [n]
    n = len(x)
    return _Row(_windows(w.numpy(), max_gamma), _windows(alpha.numpy(), max_gamma), np.full(n, max_gamma))


def _lookup_row(p, x, prompt: list[int], cont: list[int], max_gamma: int, lookup) -> _Row:
    n = len(cont)
    w, alpha, avail = np.zeros((n, max_gamma)), np.zeros((n, max_gamma)), np.zeros(n, dtype=int)
    for s in range(n):
        d = lookup.lookup(prompt + cont[:s], max_gamma)[: n - s]
        avail[s] = len(d)
        for j, tok in enumerate(d):
            w[s, j] = float(cont[s + j] == tok)
            alpha[s, j] = float(p[s + j, tok])  # one-hot q: accepted with probability p(d)
    return _Row(w, alpha, avail)


def _block_reach(p, q, x, max_gamma: int) -> np.ndarray:
    """`[n, K]`: for a chain starting at s, the ceiling on P(a verifier accepts >= i) (NaN past the text).

    P(>= i) = E_{x ~ p}[sum_v min(p_t(v), R q_t(v))], t = s + i - 1, R = prod_{s <= j < t} q_j(x_j)/p_j(x_j).
    """
    n = len(x)
    px, qx = p.gather(1, x[:, None])[:, 0], q.gather(1, x[:, None])[:, 0]
    log_ratio = torch.log(qx.clamp(min=1e-300)) - torch.log(px.clamp(min=1e-300))  # [n]
    out = np.full((n, max_gamma), np.nan)
    csum = torch.cat([torch.zeros(1, dtype=torch.float64), log_ratio.cumsum(0)])  # [n + 1]
    for d in range(max_gamma):  # depth d: token t = s + d of a chain starting at s
        if d >= n:
            break
        t = torch.arange(d, n)
        R = torch.exp(csum[t] - csum[t - d]).clamp(max=1e300)  # [n - d]
        out[: n - d, d] = torch.minimum(p[t], R[:, None] * q[t]).sum(1).clamp(max=1.0).numpy()
    return out
