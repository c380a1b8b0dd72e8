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

Block verification (Sun et al. 2024) is replayed exactly too. Its running weights along a chain,
``W_0 = 1, W_i = min(1, W_{i-1} p(x_i)/q(x_i))``, satisfy ``P(tau >= i, X_1..X_i = x_1..x_i) = q(x_1..x_i) W_i``
whatever gamma >= i (checked by enumeration in the tests), so given the target's text, with
``R_i = prod_{j<=i} q_j(x_j)/p_j(x_j)``, a step accepts at least i tokens and emits the text with probability
``A_i = R_i W_i = min(R_i, A_{i-1})`` relative to the text's own probability, and exactly m < k with
``A_m - A_{m+1}`` (the block residual's mass on the next text token). That is the token rule's Markov chain
with ``A_i`` in place of ``w_s .. w_{s+i-1}``; the expectation of the last factor given the prefix is
``sum_v min(R_{i-1} q_t(v), A_{i-1} p_t(v))``. Every ``A_i`` is at most 1: the estimate is bounded.
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
    block_a: np.ndarray | None = None  # [n, K] A_i of a chain from s (module docstring); sampled draft only
    block_ea: np.ndarray | None = None  # [n, K] E[A_i | prefix]
    rank_num: np.ndarray | None = None  # [n, ranks] tree siblings (exactspec.deploy.offlinetrees.rank_terms)
    rank_den: np.ndarray | None = None
    engine: dict | None = None  # what the engines' rules need (exactspec.deploy.enginerules.RowTerms)

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
    texts: list[list[int]] = field(default_factory=list)  # the written continuations (token ids)

    @property
    def tokens(self) -> int:
        return sum(r.n for r in self.rows)

    @property
    def block_differs(self) -> bool:
        """Whether block verification's replay differs from the token rule's: sampled, with a draft model
        (greedy, every rule is the greedy rule; prompt lookup's one-hot q makes block's weights the token
        rule's products)."""
        return bool(self.rows) and all(r.block_a is not None for r in self.rows)

    def replay(self, gamma: int, method: str = "token", weights: list | None = None) -> Replay:
        """Expected statistics of ``generate(gamma=gamma, method=method)`` over the written texts (no EOS
        inside them). ``method``: "token" or "block" (see the module docstring). ``weights``: a list that
        receives, per row, ``[n, gamma]``: entry [t, d] the probability that a step reaches draft position
        d + 1 at written position t (what :mod:`exactspec.deploy.offlinetrees` weighs sibling ranks by)."""
        if isinstance(gamma, bool) or not isinstance(gamma, int) or not 1 <= gamma <= self.max_gamma:
            raise ValueError(f"gamma must be an integer in 1..{self.max_gamma}, got {gamma!r}")
        if method not in ("token", "block"):
            raise ValueError(f"method must be 'token' or 'block', got {method!r}")
        block = method == "block" and self.block_differs
        drafted, accepted = np.zeros(gamma), np.zeros(gamma)
        lengths, steps = np.zeros(gamma + 1), 0.0
        for row in self.rows:
            n = row.n
            at = np.zeros((n + gamma, gamma)) if weights is not None else None
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
                # a[i-1] = A_i: P(at least i accepted and the text emitted) / P(text); token: w_s..w_{s+i-1}
                a = row.block_a[s, :k] if block else np.cumprod(row.w[s, :k])  # [k]
                reach = np.concatenate(([1.0], a[:-1]))  # [k] P(position i reached)
                drafted[:k] += pi * reach
                if at is not None:
                    at[s + np.arange(k), np.arange(k)] += pi * reach
                accepted[:k] += pi * (row.block_ea[s, :k] if block else reach * row.alpha[s, :k])
                start[s + 1:s + k + 1] += pi * (reach - a)  # [k] P(exactly m accepted), m < k
                start[s + k + 1] += pi * a[-1]
            if weights is not None:
                weights.append(at[:n])
        return Replay(gamma, drafted, accepted, lengths, steps, self.tokens)


def rows_from_text(w: list, alpha: list, max_gamma: int) -> list[_Row]:
    """Rows for :class:`OfflineAcceptance` from per-text arrays: ``w[r] [n_r]``, the weight of the text's token at
    each written position (module docstring), and ``alpha[r] [n_r]``, the acceptance expected there; for texts
    some other sampler wrote (an engine's, in ``exactspec audit``) under a rule of the caller's choosing."""
    return [_Row(_windows(np.asarray(a_w, float), max_gamma), _windows(np.asarray(a_a, float), max_gamma),
                 np.full(len(a_w), max_gamma)) for a_w, a_a in zip(w, alpha)]


# ------------------------------------------------------------------------------------------ measuring
def measure_acceptance(target, tokenizer, prompts: list[str], *, draft=None, prompt_lookup: bool = False,
                       max_new_tokens: int = 64, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                       max_gamma: int = 8, ngram: int = 3, seed: int = 0, batch_size: int = 8,
                       stop_at_eos: bool = True, tree_ranks: int = 0, tree_draws: int = 16,
                       row_terms=None) -> OfflineAcceptance:
    """Write continuations with the target, then measure acceptance with one teacher-forced pass per batch.

    ``draft`` (a causal LM sharing the tokenizer) or ``prompt_lookup=True``. Temperature 0 is greedy.
    ``stop_at_eos=False`` writes exactly ``max_new_tokens`` per prompt, EOS an ordinary token (as
    ``generate(eos_token_id=[])`` does). ``tree_ranks`` (draft model only): also measure tree siblings of
    ranks 0..tree_ranks-1 (:mod:`exactspec.deploy.offlinetrees`; sampled: ``tree_draws`` seeded draws per position).
    ``row_terms(p, q_logits, x, prompt_ids, continuation)``: what else to keep per text (``_Row.engine``; the
    engines' rules, :class:`exactspec.deploy.enginerules.RowTerms`).
    """
    from exactspec.engine.drafters import PromptLookupDrafter, SamplingSpec

    if (draft is None) == (not prompt_lookup):
        raise ValueError("give a draft model or prompt_lookup=True (exactly one)")
    for name, v, low in (("max_new_tokens", max_new_tokens, 1), ("max_gamma", max_gamma, 1), ("ngram", ngram, 1),
                         ("batch_size", batch_size, 1), ("tree_ranks", tree_ranks, 0), ("tree_draws", tree_draws, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    if tree_ranks and prompt_lookup:
        raise ValueError("tree_ranks needs a draft model (prompt lookup drafts no trees)")
    if not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty strings")
    greedy = temperature == 0
    from exactspec.backends.seam import vocab_size

    vocab = vocab_size(target)
    spec = SamplingSpec(greedy=greedy, temperature=float(temperature), top_k=top_k, top_p=top_p,
                        generator=torch.Generator(), vocab_size=vocab)
    spec.probs(torch.zeros(1, 2))  # validates temperature / top_k / top_p before any model runs
    lookup = PromptLookupDrafter(max_ngram=ngram, max_draft=max_gamma) if prompt_lookup else None
    rows, texts = [], []
    for i in range(0, len(prompts), batch_size):
        enc = [tokenizer(p)["input_ids"] for p in prompts[i:i + batch_size]]
        conts = _write(target, tokenizer, enc, max_new_tokens, spec, seed + i, stop_at_eos)
        texts += conts
        trees = (tree_ranks, tree_draws, torch.Generator().manual_seed(seed + i)) if tree_ranks else None
        rows += _teacher_forced(target, draft, enc, conts, spec, max_gamma, lookup, trees, row_terms)
    return OfflineAcceptance(greedy, "prompt_lookup" if prompt_lookup else "draft_model", max_gamma, rows, texts)


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
    if getattr(target, "backend", None):  # a model on another backend: our target-alone loop through it
        return _write_on_backend(target, enc, max_new, spec, seed, stop_at_eos)
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


def _write_on_backend(target, enc: list[list[int]], max_new: int, spec, seed: int, stop_at_eos: bool):
    """As :func:`_write`, for a model that has no transformers `generate` (a GGUF file on llama.cpp): one
    token per call through its session, drawn from ``spec``'s law (temperature, top-k, top-p)."""
    from exactspec.backends.seam import open_session

    gen = torch.Generator().manual_seed(seed)
    ids, mask = _pad(enc, 0, left=True)
    session = open_session(target, len(enc), target=True)
    with torch.inference_mode():
        logits = session.forward(ids, mask.bool(), logits_to_keep=1)[:, -1]  # [B, V]
        rows = []
        for step in range(max_new):
            law = spec.probs(logits)  # [B, V]
            nxt = law.argmax(-1) if spec.greedy else torch.multinomial(law, 1, generator=gen)[:, 0]
            rows.append(nxt)
            if step < max_new - 1:
                logits = session.forward(nxt[:, None], torch.ones(len(enc), 1, dtype=torch.bool))[:, -1]
    eos = set(_eos_ids(target)) if stop_at_eos else set()
    conts = []
    for row in torch.stack(rows, 1).tolist():
        cut = next((j + 1 for j, t in enumerate(row) if t in eos), len(row))
        conts.append(row[:cut])
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
    if getattr(model, "backend", None):  # another backend: one pass through a session (zeros at the pads)
        from exactspec.backends.seam import open_session

        return open_session(model, ids.shape[0], target=True).forward(ids, mask.bool())[:, -keep:].float().cpu()
    dev = model.device
    out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), logits_to_keep=keep, use_cache=False)
    return out.logits[:, -keep:].float().cpu()


def _teacher_forced(target, draft, enc, conts, spec, max_gamma: int, lookup, trees=None, row_terms=None):
    """Per row, a :class:`_Row` (sampled with a draft model: with block verification's A_i)."""
    full = [e + c for e, c in zip(enc, conts)]
    ids, mask = _pad(full, 0, left=False)
    # Continuation token t of row b sits at column len(prompt_b) + t and is predicted at the column before.
    first = min(len(e) for e in enc) - 1  # earliest predicting column of any row
    keep = ids.shape[1] - first
    p_logits = _logits(target, ids, mask, keep)  # [B, keep, V_target]
    q_logits = _logits(draft, ids, mask, keep) if draft is not None else None
    rows = []
    for b, (prompt, cont) in enumerate(zip(enc, conts)):
        n = len(cont)
        if n == 0:
            continue
        sl = slice(len(prompt) - 1 - first, len(prompt) - 1 - first + n)
        x = torch.tensor(cont, dtype=torch.long)  # [n]
        p = _probs(spec, p_logits[b, sl])  # [n, V] (greedy: one-hot of the argmax)
        if lookup is None:
            q = _probs(spec, q_logits[b, sl])
            row = _draft_row(p, q, x, max_gamma, spec.greedy)
            if not spec.greedy:
                row.block_a, row.block_ea = _block_rows(p, q, x, max_gamma)
            if trees:
                from exactspec.deploy.offlinetrees import rank_terms

                row.rank_num, row.rank_den = rank_terms(p, q, x, trees[0], greedy=spec.greedy,
                                                        q_logits=q_logits[b, sl], generator=trees[2],
                                                        draws=trees[1])
            rows.append(row)
        else:
            rows.append(_lookup_row(p, x, prompt, cont, max_gamma, lookup))
        if row_terms is not None:
            rows[-1].engine = row_terms(p, None if lookup else q_logits[b, sl], x, prompt, cont)
    return rows


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


def _block_rows(p, q, x, max_gamma: int, chunk: int = 1 << 22) -> tuple[np.ndarray, np.ndarray]:
    """Block verification along the text, ``A [n, K]`` and ``E[A | prefix] [n, K]``: entry [s, i - 1] is
    ``A_i`` of a chain starting at s (0 past the text). ``A_i = min(R_i, A_{i-1})``, ``R_i = R_{i-1} q/p``
    at the text token, and ``E[A_i | prefix] = sum_v min(R_{i-1} q_t(v), A_{i-1} p_t(v))``, t = s + i - 1.
    ``chunk``: elements per [starts, V] temporary (memory for 49k-token vocabularies)."""
    n, V = p.shape
    px, qx = p.gather(1, x[:, None])[:, 0], q.gather(1, x[:, None])[:, 0]
    ratio = qx / px.clamp(min=1e-300)  # [n] q/p of each text token (x ~ p, so p(x) > 0)
    A, EA = np.zeros((n, max_gamma)), np.zeros((n, max_gamma))
    R, prev = torch.ones(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64)  # per start s
    step = max(1, chunk // V)
    for d in range(min(max_gamma, n)):  # depth d: text token t = s + d, for starts s < n - d
        m = n - d
        R, prev = R[:m], prev[:m]
        ea = torch.cat([torch.minimum(R[i:i + step, None] * q[d + i:d + i + step],
                                      prev[i:i + step, None] * p[d + i:d + i + step]).sum(1)
                        for i in range(0, m, step)])
        EA[:m, d] = ea.clamp(max=1.0).numpy()
        R = (R * ratio[d:]).clamp(max=1e300)
        prev = torch.minimum(R, prev)
        A[:m, d] = prev.numpy()
    return A, EA
