"""How far each step drafts: a fixed length, or ``gamma="auto"`` (the model is argued in docs/adaptive.md).

The loop asks a policy per step (see :class:`exactspec.engine.decoding.SpeculativeGenerator`):

1. ``caps = policy.next_lengths(left)``: the most tokens each row may draft (``left [B]``: tokens the row may
   still emit minus one). All zeros: a *plain step*, the target alone.
2. a model drafter asks ``policy.include(i, confidence, caps)`` before sampling position i (which rows draft
   it) and ``policy.more(i)`` after it (is the next draft call worth making); a model-free drafter, which finds
   every row's tokens at once, asks ``policy.trim(found, confidence)`` how many the step verifies.
   ``confidence [B]`` is the draft's top probability there, a function of the prefix only: whether position i
   is verified never depends on the token drawn there, so verification stays exact.
3. ``policy.observe(draft, accepted)``: the verdicts.

``gamma="auto"`` is three things, each constant named once below with the measurement behind it:

* **a price per draft length**, ``price[k]`` seconds for a step that drafts k tokens (k = 0: plain), from the
  pair's cost profile stored on disk (measured once per machine, batch size and sampling mode as the loop runs;
  :func:`exactspec.engine.loopcosts.auto_cost`), as measured, every width timed, and fixed for the run. No clock
  of the run decides anything, so a seeded run reproduces in any process. A step drafts only where that beats
  plain steps by PRICE_MARGIN: the prices move more than that between measurements.
* **an acceptance estimate**, :class:`AcceptanceModel`: P(accepted | the draft's confidence bin), decayed
  counts shrunk towards the pooled rate, and the rate of a position reached after an accepted one (acceptance
  comes in streaks), faded by DECAY a step, drafted or plain. A fresh one starts from the pair's rates counted
  where its prices were measured (the profile's ``acceptance``, :func:`exactspec.engine.loopcosts.loop_acceptance`):
  a function of the models alone, which weighs as many verdicts as a Beta belief whose spread is PRIOR_SPREAD.
  Until a run has verdicts of its own, a step drafts only where some length loses at most PRICE_MARGIN at rates
  PRIOR_SPREAD below those.
* **one exploration rule**: when no length pays, plain steps; after ``gap`` of them a probe of the length that
  would pay at rates one standard error above the estimates; ``gap`` doubles from FIRST_GAP to MAX_GAP after
  each probe and falls back to FIRST_GAP once drafting pays. The same standard error lifts the rate of
  positions after an accepted one in every stop: they are measured only when reached.

Drafting is priced by renewal reward: R = max_K E(K) / price[K] is what a step is worth per second (E(K): the
expected tokens of a K-draft step); position i is drafted while some length L >= i adds more expected tokens
than R times the seconds it adds (the model-based form of llama.cpp's ``p_min`` and SpecDec++'s stop).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import torch

__all__ = ["FixedPolicy", "AdaptivePolicy", "AcceptanceModel", "DraftingState"]

# Confidence bins over the draft's top probability, finer near 1 where a good draft spends most positions
# (prompt lookup's keys, PromptLookupDrafter.confidence, fall in the same bins).
EDGES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.995)
# A fresh model's belief where its prices came with none (a cost_model= given), and that belief's weight in
# pseudo-verdicts, as each bin's towards the pooled rate (bins differ by the draft's confidence: they learn fast)
PRIOR, PRIOR_WEIGHT = 0.7, 2.0
DECAY = 0.995  # per step, drafted or plain: old text fades (a new prompt, code after prose) over ~200 steps
OPTIMISM = 1.0  # standard errors a probe adds to the rates: a pair unlucky in its first verdicts still probes
FIRST_GAP, MAX_GAP = 4, 256  # plain steps before a probe: doubling, 6 probes then one per 256 steps at most
# A fresh model's first gap: its prior stands in for the probes of gaps 4 ... 32. Re-probing at steps 4, 12, 28
# and 60 of every seeded run where drafting lost ran 0.87x our loop, 0.97x with the first probe at 64 (llama.cpp,
# unseen9, 2026-12-04)
FRESH_GAP = 64
# How far the pair's measured rates (the profile's acceptance) lie from a new text's: on the stdlib pair they counted
# first positions at 0.69 greedy and 0.71 at T = 1, where unseen code then kept 0.73 and 0.66 (unseen_code22, 8 prompts,
# gamma = 4); on llama.cpp at T = 1 that 0.05 made gamma = 4 pay by 1% at the prior and lose 10% as run (r34). Until a
# run has verdicts of its own, a step drafts only where some length loses at most PRICE_MARGIN at rates this much
# lower (where one had to pay at them, seeded runs of the stdlib pair at T = 1 on transformers stayed plain in every
# step where gamma = 3 ran 1.11x, r37); and the measured rates weigh what a Beta belief of this spread does (about 83
# verdicts at 0.7: AcceptanceModel.weight)
PRIOR_SPREAD = 0.05
# How much faster than plain steps drafting must be at the profile's prices before a step drafts: the prices move
# more than that between measurements here (two loop profiles 30 minutes apart priced gamma = 4 at 2.47 and 3.27
# plain steps, r35), and a seeded run that drafted gamma = 2 where it paid 1% on paper ran 0.85x the target alone
# (stdlib, llama.cpp, greedy, r35). Staying plain where drafting would gain under 3% costs at most 1 - 1/1.03 of
# the best fixed gamma's speed (0.971x), inside the 0.95 bar; at rates PRIOR_SPREAD lower a fresh run's step may
# lose at most this, as the 0.97 bar for the target alone allows
PRICE_MARGIN = 0.03


class FixedPolicy:
    """Every row drafts ``min(gamma, left)`` tokens; never stops early. ``gamma = 0``: plain steps only."""

    wants_confidence, early_stops = False, 0

    def __init__(self, gamma: int):
        self.gamma = gamma

    def next_lengths(self, left: torch.Tensor) -> torch.Tensor:
        return left.clamp(min=0, max=self.gamma)

    def include(self, i: int, confidence: torch.Tensor, caps: torch.Tensor) -> torch.Tensor:
        return caps >= i

    def more(self, i: int) -> bool:
        return True

    def trim(self, found: list[int], confidence: list[list[float]] | None = None) -> int:
        return max(found, default=0)

    def observe(self, draft, accepted: torch.Tensor) -> None:
        pass

    def plain_streak(self) -> int:
        return 1 if self.gamma else 1 << 30

    def skip_plain(self, m: int) -> None:
        pass


def _floats(x) -> list:
    return x.tolist() if isinstance(x, torch.Tensor) else list(x)


@dataclass
class AcceptanceModel:
    """P(accepted | confidence bin): per bin decayed verdicts `n` and acceptances `a`, each bin shrunk towards
    the pooled rate with PRIOR_WEIGHT pseudo-verdicts, the pooled rate towards the prior with its `weight`;
    `seen` counts each bin's occurrences (drafted or not), which weigh the rate of a position not drafted yet;
    `later_n` / `later_a` are the verdicts of positions reached after an accepted one. Plain floats: asked a few
    rows at a time, between forwards."""

    n: list = field(default_factory=lambda: [0.0] * len(EDGES))
    a: list = field(default_factory=lambda: [0.0] * len(EDGES))
    seen: list = field(default_factory=lambda: [0.0] * len(EDGES))
    later_n: float = 0.0
    later_a: float = 0.0
    prior: float = PRIOR  # the rate before any verdict (a first position's)
    prior_later: float | None = None  # a position after an accepted one's before any verdict (None: the pooled)

    @staticmethod
    def bins(confidence) -> list[int]:
        return [max(bisect.bisect_right(EDGES, c) - 1, 0) for c in _floats(confidence)]

    @property
    def observations(self) -> float:
        return sum(self.n)

    def weight(self, prior: float | None = None) -> float:
        """What a prior weighs in pseudo-verdicts: PRIOR_WEIGHT where nobody measured it; a measured one (the
        pair's rate `prior`, default the first position's) as a Beta whose spread is PRIOR_SPREAD. At 2 a fresh run's
        first rejection took 0.705 to 0.47, and seeded runs of the stdlib pair went plain for 528 of 1,536 steps
        where the text kept 0.67 (transformers, T = 1, unseen_code25, r36: 0.86x gamma = 4)."""
        p = self.prior if prior is None else prior
        return PRIOR_WEIGHT if self.prior_later is None else max(PRIOR_WEIGHT, p * (1 - p) / PRIOR_SPREAD ** 2 - 1)

    @property
    def pooled(self) -> float:
        w = self.weight()
        return (sum(self.a) + w * self.prior) / (sum(self.n) + w)

    def rates(self) -> list[float]:
        pooled = self.pooled
        return [(a + PRIOR_WEIGHT * pooled) / (n + PRIOR_WEIGHT) for a, n in zip(self.a, self.n)]

    def predict(self, confidence) -> list[float]:
        rates = self.rates()
        return [rates[b] for b in self.bins(confidence)]

    def mean(self) -> float:
        """A position not drafted yet: the bins' rates weighed by how often each occurs."""
        total = sum(self.seen)
        return self.pooled if total <= 0 else sum(s * r for s, r in zip(self.seen, self.rates())) / total

    def best(self) -> float:
        """The best bin that occurred: what a model-free drafter, which looks only where it finds, is worth."""
        return max((r for s, r in zip(self.seen, self.rates()) if s > 0), default=self.pooled)

    def continuation(self) -> float:
        """A position reached after an accepted one, shrunk towards the pooled rate. Higher than the pooled
        rate, which the first position pulls down: pricing later positions at it stopped steps too early
        (held-out greedy: 55 of 114 steps stopped at 2 where gamma = 4 ran 8% faster)."""
        base, w = (self.pooled if self.prior_later is None else self.prior_later), self.weight(self.prior_later)
        return (self.later_a + w * base) / (self.later_n + w)

    def doubt(self) -> float:
        """What is left of PRIOR_SPREAD in the rates: a measured prior's share of the pooled rate, shrinking as the
        run's own verdicts come."""
        return 0.0 if self.prior_later is None else PRIOR_SPREAD * (w := self.weight()) / (self.observations + w)

    def uncertainty(self, z: float | None = None) -> tuple[float, float]:
        """`z` (default OPTIMISM) standard errors, a Beta posterior's spread, of the pooled rate and of the
        continuation's."""
        z = OPTIMISM if z is None else z

        def spread(p: float, n: float, w: float) -> float:
            return z * math.sqrt(p * (1.0 - p) / (n + w + 1.0))

        return (spread(self.pooled, self.observations, self.weight()),
                spread(self.continuation(), self.later_n, self.weight(self.prior_later)))

    def see(self, confidence) -> None:
        for b in self.bins(confidence):
            self.seen[b] += 1.0

    def fade(self, steps: int = 1) -> None:
        """`steps` steps of text passed: every count decays by DECAY each, drafted or plain (a model that counted
        only drafted steps kept one poor prompt's verdicts for good once it stopped drafting: a generator ran
        1,522 of 1,536 steps plain where gamma = 4 ran 1.32x, transformers, greedy, r34)."""
        d = DECAY ** steps
        self.n, self.a, self.seen = [v * d for v in self.n], [v * d for v in self.a], [v * d for v in self.seen]
        self.later_n, self.later_a = self.later_n * d, self.later_a * d

    def observe(self, confidence, accepted, later=None) -> None:
        """A verified step: decay, then count (`later [N]`: the position came after an accepted one)."""
        self.fade()
        accepted = _floats(accepted)
        self.count(confidence, accepted, [False] * len(accepted) if later is None else later)

    def count(self, confidence, accepted, later) -> None:
        """Add verdicts undecayed: `accepted` and `later` bools."""
        for b, ok, lat in zip(self.bins(confidence), _floats(accepted), later):
            self.n[b] += 1.0
            self.a[b] += float(ok)
            self.later_n += float(lat)
            self.later_a += float(lat) * float(ok)


@dataclass
class DraftingState:
    """What gamma="auto" carries from a run to the next of one generator: the model and the probing state."""

    model: AcceptanceModel = field(default_factory=AcceptanceModel)
    probe_gap: int = FRESH_GAP
    since_probe: int = 0


class AdaptivePolicy:
    """``gamma="auto"`` (module doc). `cost_model`: a :class:`~exactspec.speed.costmodel.CostModel` at the run's
    batch size; `free_draft`: a model-free drafter (draft calls cost nothing); `row_stops`: in a batch, stop
    each row on its own P (for an engine that prices each row's width; the exactness tests use it)."""

    wants_confidence = True

    def __init__(self, cost_model, max_gamma: int, state: DraftingState | None = None, *,
                 free_draft: bool = False, row_stops: bool = False):
        # The table as measured: verifying more tokens can cost less (a kernel's blocking), and a length made as dear
        # as its dearer neighbour by the isotonic fit ran 0.91x the best fixed gamma against 0.97x with the
        # measured dips (stdlib, transformers, T = 1, held-in prompts, 2026-12-06); on unseen prompts both missed
        # at T = 1, the table itself moving between measurements (docs/adaptive.md, r27)
        cm = cost_model.without_draft() if free_draft else cost_model
        self.max_gamma, self.free_draft, self.row_stops = max_gamma, free_draft, row_stops
        self.state = state if state is not None else DraftingState()
        self.model = self.state.model
        rates = cm.metadata.get("acceptance") if not free_draft else None
        if rates and self.model.observations == 0:  # a fresh model believes the pair's measured rates
            self.model.prior, self.model.prior_later = float(rates["first"]), float(rates["later"])
        self.t_draft = cm.t_draft
        self.price = [cm.step_time(k) for k in range(max_gamma + 1)]  # [K+1] seconds of a k-draft step
        self.rate = 1.0 / self.price[0]
        # No draft can pay at these prices, not even one the target always keeps: the target alone, no probe
        self.hopeless = self.best_length(1.0, 1.0)[0] == 0
        self.probing, self._plain, self.early_stops = False, False, 0
        self._p = self._alive = self._w = None  # this step, per row: P(all so far accepted), drafting, weight

    @staticmethod
    def expected(k: int, first: float, later: float) -> float:
        """E(k): the expected tokens of a step drafting k at rates `first` (its first position) and `later`."""
        first, later = max(first, 0.0), max(later, 0.0)
        return 1.0 + first * sum(later ** i for i in range(k))

    def best_length(self, first: float, later: float, floor: float | None = None) -> tuple[int, float]:
        """(K, tokens per second) of the best fixed length: `first` the first position's rate, `later` the
        others'. K = 0: no length beats `floor` tokens per second (default: a plain step's)."""
        best, rate = 0, 1.0 / self.price[0] if floor is None else floor
        for k in range(1, self.max_gamma + 1):
            if (r := self.expected(k, first, later) / self.price[k]) > rate * (1 + 1e-9):
                best, rate = k, r
        return best, rate

    # ------------------------------------------------------------------------------ the step
    def next_lengths(self, left: torch.Tensor) -> torch.Tensor:
        m, st = self.model, self.state
        if self.hopeless:
            self._plain = True
            return left.clamp(min=0, max=0)
        # a model-free drafter looks for free and trims by its match: worth its best kind of match
        self._first, self._later = (m.best() if self.free_draft else m.mean()), m.continuation()
        k, self.rate = self.best_length(self._first, self._later)
        if k and self.rate * self.price[0] < 1 + PRICE_MARGIN:
            k = 0  # it pays by less than the prices' own noise (PRICE_MARGIN)
        if k and (d := m.doubt()) and not self.best_length(self._first - d, self._later - d,
                                                           (1 - PRICE_MARGIN) / self.price[0])[0]:
            k = 0  # at what a new text may keep (PRIOR_SPREAD lower) every length would lose more than the margin
        u1, u2 = m.uncertainty()
        # Optimism: a position after an accepted one is measured only when reached, so its rate is valued one
        # standard error up in every stop (one early rejection there kept later steps at one token for good)
        self._later = min(self._later + u2, 1.0)
        self.probing = False
        if k:
            st.probe_gap = FIRST_GAP
        else:
            st.since_probe += 1
            # the one exploration rule (module doc), when a row can draft: a probe due at a run's last token
            # (nothing left to draft) waits for the next step that can, rather than doubling the gap unseen (runs
            # of 64 tokens met every gap, all multiples of 64, at their last token: a generator probed never)
            if st.since_probe >= st.probe_gap and bool((left > 0).any()):
                k = max(1, self.best_length(min(self._first + u1, 1.0), self._later)[0])
                self.probing, st.since_probe, st.probe_gap = True, 0, min(2 * st.probe_gap, MAX_GAP)
            else:
                m.fade()  # a plain step's text passes too (observe fades a verified one)
        self._plain, self._p = k == 0, None
        # a model drafter stops itself (include / more); a probe drafts its length; lookup trims what it found
        cap = (k if self.probing else self.max_gamma) if k else 0
        if cap:  # a batch ends with its slowest row: rows weigh by the tokens they have left
            w = (left.clamp(min=0) + 1).tolist()
            self._w = [x / sum(w) for x in w]
        return left.clamp(min=0, max=cap)

    def plain_streak(self) -> int:
        """After a plain step by decision: the steps until the next probe, all plain (without verdicts the model
        only fades towards its prior: a fade that would make drafting pay is acted on at the probe); the loop may
        run them at once and tell :meth:`skip_plain`."""
        if self.hopeless:
            return 1 << 30
        return max(1, self.state.probe_gap - self.state.since_probe) if self._plain else 1

    def skip_plain(self, m: int) -> None:
        self.state.since_probe += m
        self.model.fade(m)

    def threshold(self, i: int, paid: bool = True) -> float:
        """The least P(positions <= i accepted) for which drafting position i pays (`paid`: its draft call was
        made; else P covers positions < i and position i counts at its expected rate). Drafting on to L >= i
        adds P (1 + a + .. + a^(L-i)) tokens (a: the continuation rate) and price[L] - price[i-1] seconds
        (less one draft call when paid); at R tokens per second that pays iff P > R seconds / tokens."""
        a, s, best = self._later, 0.0, math.inf
        pw = 1.0 if paid else (self._first if i == 1 else self._later)
        for L in range(i, self.max_gamma + 1):
            s += pw
            pw *= a
            extra = self.price[L] - self.price[i - 1] - (self.t_draft if paid else 0.0)
            best = min(best, self.rate * extra / max(s, 1e-300))
        return best

    def _batch_p(self, p: list) -> float:
        w = self._w if self._w is not None and len(self._w) == len(p) else [1.0 / len(p)] * len(p)
        return sum(wi * pi for wi, pi in zip(w, p))

    def include(self, i: int, confidence: torch.Tensor, caps: torch.Tensor) -> torch.Tensor:
        """Which rows draft position i (`confidence [B]`, `caps [B]`; returns [B] bool). Batch 1: while the
        row's P pays. A batch: one forward serves every row at the longest row's width, so once the batch's P
        pays every row whose cap allows it drafts (stopping rows there threw tokens away at no saving: batch 4
        drafted 2.7-2.8 tokens per row-step against gamma = 4's 3.16, r13); else the whole batch stops."""
        conf = confidence.tolist()
        self.model.see(conf)
        acc = self.model.predict(conf)
        if self._p is None:
            self._caps, prev, alive = caps.tolist(), [1.0] * len(conf), [True] * len(conf)
        else:
            prev, alive = self._p, self._alive
        alive = [al and c >= i for al, c in zip(alive, self._caps)]
        p = [pp * a if al else 0.0 for pp, a, al in zip(prev, acc, alive)]
        if self.probing and i == 1:  # a probe verifies at least one position
            ok = alive
        elif self._batch_p(p) <= (h := self.threshold(i)):
            ok = [False] * len(p)
        else:
            ok = alive if len(p) > 1 and not self.row_stops else [al and pi > h for al, pi in zip(alive, p)]
        self.early_stops += sum(al and not o for al, o in zip(alive, ok))
        self._p, self._alive = p, ok
        return torch.tensor(ok, dtype=torch.bool, device=confidence.device)

    def more(self, i: int) -> bool:
        """After position i: is the draft call for position i + 1 expected to pay? (asked before making it)"""
        if self._p is None or i >= self.max_gamma:
            return False
        go = any(self._alive) and self._batch_p(self._p) > self.threshold(i + 1, paid=False)
        if not go:
            self.early_stops += sum(al and c > i for al, c in zip(self._alive, self._caps))
        return go

    def trim(self, found: list[int], confidence: list[list[float]] | None = None) -> int:
        """A model-free drafter's width: the L maximising (B + sum_b E_b(min(L, found_b))) / price[L], E_b(m) the
        expected accepted tokens of row b's first m found tokens at their bins' rates (`confidence [B][found_b]`)
        or at the first and continuation rates. The step is as wide as its longest row: pricing rows alone made
        batch-4 steps 5 wide whenever one row found a repeat (0.84-0.91x the target alone, r13)."""
        top = min(max(found, default=0), self.max_gamma)
        if top == 0:
            return 0
        if confidence is None:
            rates = [[self._first] + [self._later] * (top - 1)] * len(found)
        else:
            self.model.see([c[0] for c, f in zip(confidence, found) if f])
            rates = [self.model.predict(c[:top]) for c in confidence]
        cum = []  # per row: E_b(m), m = 0 .. len
        for r in rates:
            row, p = [0.0], 1.0
            for x in r:
                p *= x
                row.append(row[-1] + p)
            cum.append(row)
        best, rate = 0, len(found) / self.price[0]
        for width in range(1, top + 1):
            r = (len(found) + sum(row[min(width, f, len(row) - 1)] for row, f in zip(cum, found))) / self.price[width]
            if r > rate * (1 + 1e-9):
                best, rate = width, r
        best = max(best, 1) if self.probing else best
        self.early_stops += sum(f > best for f in found)
        return best

    def observe(self, draft, accepted: torch.Tensor) -> None:
        """Verdicts: position j of row b was reached when j <= n_b + 1. `draft.confidence [B, K]`, or None
        (one-hot q of a model-free drafter: confidence 1, seen here since include() was not asked)."""
        if draft.tokens.shape[1] == 0:
            return
        lengths, acc = draft.lengths.tolist(), accepted.tolist()
        conf = draft.confidence.tolist() if draft.confidence is not None else None
        if conf is None:
            self.model.see([1.0] * sum(lengths))
        seen, ok, later = [], [], []
        for b, (length, n) in enumerate(zip(lengths, acc)):
            for j in range(min(length, n + 1)):
                seen.append(1.0 if conf is None else conf[b][j])
                ok.append(j < n)
                later.append(j > 0)
        self.model.observe(seen, ok, later)
