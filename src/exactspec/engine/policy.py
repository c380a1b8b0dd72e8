"""Drafting policies: how far each step drafts, and when drafting stops early.

The engine loop asks a policy three things per step (see :class:`exactspec.engine.decoding.SpeculativeGenerator`):

1. ``caps = policy.next_lengths(left)``: the most tokens each row may draft this step (``left [B]`` = tokens
   the row may still emit minus one). All zeros means a *plain step*: the target decodes one token alone,
   costing ``T_target(1)`` instead of ``T_target(2)`` plus draft calls.
2. ``policy.include(i, confidence, caps)`` (asked by model drafters before sampling position i): which
   rows draft position i; and ``policy.more(i)`` (after position i): is the next draft call worth making;
   ``policy.trim(found)`` (asked by model-free drafters, which find every row's tokens at once): how
   many of them the step verifies. ``confidence [B]`` is the draft's top probability at that position,
   ``max_x q_i(x)``, a function of the prefix only: the decision never looks at the token that will be
   sampled there, so whether position i is verified does not depend on X_i, and verification stays exact
   (the token rule's proof goes position by position given the prefix; block verification is checked by
   enumeration in the tests).
3. ``policy.observe(draft, accepted)``: learn from the verdict.

:class:`AdaptivePolicy` (``gamma="auto"``) keeps an *acceptance model*: P(a drafted token is accepted | the
draft's confidence at its position), learned online in confidence bins, each shrunk towards the pooled rate.
With a cost model fixed for the run (no wall-clock timings taken inside it, so a seeded run reproduces) it
prices drafting by renewal reward: the throughput R = max_K E(K) / T(K) of the best fixed length under the
model, and position i is drafted while some length L >= i adds more expected tokens than R times the time
it adds. That is the model-based form of llama.cpp's ``p_min`` and SpecDec++'s stop rule, with the threshold
following from the costs and the measured acceptance instead of a constant. When no length pays, not even
at rates one standard error above the estimates (optimism while the evidence is thin: a fresh policy whose
first verdicts were unlucky keeps probing), it takes plain steps and re-probes with an exponentially
growing gap, so it notices when drafting starts to pay. A run whose learning ends with it (a seeded run)
probes optimistically only where its own remaining tokens can repay the probe (:meth:`AdaptivePolicy.probe_pays`).
Confidence bins are position-free, so positions never reached need no exploration of their own. Positions
not drafted yet are priced at the *continuation rate*, the acceptance of a position reached after an
accepted one: acceptance comes in streaks, so it is higher than the rate pooled over all positions.
"""
from __future__ import annotations

import math

import torch

from exactspec.engine.acceptmodel import AcceptanceModel, DraftingState
from exactspec.engine.promptprior import PROMPT_WEIGHT
from exactspec.verification.checks import check_real

__all__ = ["FixedPolicy", "AdaptivePolicy", "AcceptanceModel", "DraftingState"]


class FixedPolicy:
    """Every row drafts ``min(gamma, left)`` tokens; never stops early."""

    wants_confidence = False
    early_stops = 0

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
        # a fixed length is plain only when no tokens are left to draft; gamma = 0 (internal: pricing a plain
        # step, exactspec.engine.loopcosts) is plain throughout, in streaks as gamma="auto" runs them
        return 1 if self.gamma else 1 << 30

    def skip_plain(self, m: int) -> None:
        pass


class AdaptivePolicy:
    """``gamma="auto"``: plain steps when no draft length pays, else draft while it pays (see module doc).

    Args:
        cost_model: a :class:`~exactspec.speed.costmodel.CostModel` at the run's batch size, fixed for the run.
        max_gamma: the longest draft of a step.
        state: a :class:`DraftingState` carried over from earlier runs (updated in place), or None. Its
            `probe_gap` is the number of plain steps before a re-probe; doubled after each probe, up to
            `max_probe_gap`, and reset to `first_gap` once drafting pays.
        optimism: standard errors added to the acceptance estimates (:meth:`AcceptanceModel.uncertainty`):
            to the continuation rate in every decision, and to the first position's rate before a step is
            made plain (while a length would pay at that rate, the step is a probe instead). 0 turns
            exploration off.
        free_draft: a model-free drafter (prompt lookup): draft calls cost nothing.
        row_stops: in a batch, stop each row on its own P as well (see :meth:`include`), for an engine that
            prices each row's width (ragged verification); the exactness tests use it to make stops
            row-specific. Default False: this engine's forwards serve every row at the longest row's width.
        weigh_left: in a batch, weigh each row's P by the tokens it has left when deciding whether the batch
            drafts on (see :meth:`include`); False: every row alike.
        learns_for_later: what this policy learns outlives its run (a generator's state, carried to its next
            runs). False for a seeded run, whose fresh state ends with it: an optimistic probe must then be
            repaid within the run's own tokens (:meth:`probe_pays`).
    """

    wants_confidence = True

    def __init__(self, cost_model, max_gamma: int, state: DraftingState | None = None, *,
                 free_draft: bool = False, first_gap: int = 4, max_probe_gap: int = 256, optimism: float = 1.0,
                 row_stops: bool = False, weigh_left: bool = True, learns_for_later: bool = True):
        self.max_gamma, self.free_draft, self.row_stops, self.weigh_left = max_gamma, free_draft, row_stops, weigh_left
        self.learns_for_later = learns_for_later
        self._w: list | None = None  # per row: its weight in the batch's decision (sums to 1)
        self.optimism = check_real("optimism", optimism, min=0.0)
        self.state = state if state is not None else DraftingState(probe_gap=first_gap)
        self.model = self.state.model
        self._first_gap, self.max_probe_gap = first_gap, max_probe_gap
        self.probing = False
        self._planned: tuple | None = None  # what _plan() worked out, until the acceptance model changes
        self._plain = False  # the last next_lengths decided a plain step
        self._planned_for = None  # the acceptance model _planned was worked out from
        self.early_stops = 0  # row-steps whose drafting the policy stopped before their cap
        self._p: list | None = None  # per row: P(all positions so far accepted); None before a step drafts
        self._alive: list | None = None  # per row: still drafting this step
        # Priced on the table made monotone in k: a noisy measurement must not make the policy chase a k
        # that happened to time cheaper than a smaller one.
        cost_model = cost_model.monotone()
        if free_draft:
            cost_model = cost_model.without_draft()
        self.cost = cost_model  # what the policy prices with
        self._t_draft = cost_model.t_draft
        self._step = [cost_model.step_time(k) for k in range(max_gamma + 1)]  # k = 0: a plain step
        # A step's seconds outside draft calls when it verifies k drafted tokens: T_target(k + 1) and the loop's
        # overhead at that length (k = 0: a plain step, which skips the verification path)
        self._verify = [cost_model.t_target(k + 1) + cost_model.overhead(k) for k in range(max_gamma + 1)]
        self._rate = 1.0 / self._step[0]

    @property
    def wants_prompt_prior(self) -> bool:
        """A fresh acceptance model (no verdicts, no prompt evidence yet) of a model drafter: the run's prefill
        may hand it the prompt's evidence (:meth:`seed_from_prompt`)."""
        return not self.free_draft and self.model.observations == 0

    def seed_from_prompt(self, confidence: list, accept: list, after: list) -> None:
        """Start from the prompt's expected verdicts (:func:`exactspec.engine.promptprior.prompt_evidence`),
        undecayed, each in its confidence bin (as seen and as verified) and, weighed by the chance its predecessor
        was accepted, towards the continuation rate.

        The evidence also stands in for the probes it replaces: the gap before the first re-probe grows as if
        each of its pseudo-observations had been a probe (doubling the gap, up to `max_probe_gap`). A fresh
        gap of 4 re-probed at steps 4, 12, 28 and 60 of every seeded run, each probe a draft call and a
        two-token verification where the prompt had already said drafting loses (llama.cpp, unseen9: 0.87x
        our loop seeded, 0.97x with the gap grown, greedy and T = 1, 2026-12-04). A generator's first run
        grows its carried state's gap alike (reset once drafting pays)."""
        self.model.count(confidence, accept, after, weight=PROMPT_WEIGHT, seen=True)
        doublings = int(len(confidence) * PROMPT_WEIGHT)
        if doublings:
            self.state.probe_gap = min(self.max_probe_gap, self.state.probe_gap << min(doublings, 32))
        self._planned = None

    # ------------------------------------------------------------------------------ pricing
    def step_time(self, k: int) -> float:
        """Seconds of a step drafting k tokens (k = 0: a plain step): :meth:`CostModel.step_time`."""
        return self._step[k]

    def best_length(self, alpha: float, later: float | None = None) -> tuple[int, float]:
        """(K, tokens per second) of the best fixed length 0..max_gamma: acceptance `alpha` at position 1 and
        `later` (default `alpha`) at each position after an accepted one."""
        best, rate, e, pw = 0, 1.0 / self.step_time(0), 1.0, 1.0
        for k in range(1, self.max_gamma + 1):
            pw *= alpha if k == 1 or later is None else later
            e += pw
            r = e / self.step_time(k)
            if r > rate * (1 + 1e-9):
                best, rate = k, r
        return best, rate

    # ------------------------------------------------------------------------------ protocol
    def _plan(self) -> tuple:
        """`(k, rate, alpha, hope, hopeful)` from the acceptance model as it stands: the best fixed length
        and its rate, the first position's rate, the continuation's optimistic rate, and when no length pays
        (k = 0), the length that would pay at optimistic rates (0 if none). Kept until the model changes
        (include / observe): a run of plain steps, where nothing is verified, asks it once, not once per step."""
        if self._planned is None or self._planned_for is not self.model:  # (a model swapped in counts as new)
            self._planned_for = self.model
            # A model-free drafter's lookup is free and trim() decides each step by its match, so it looks
            # while the best kind of match it has met pays; a model drafter's positions come as they come.
            alpha = self.model.best() if self.free_draft else self.model.mean()
            later = self.model.continuation()
            k, rate = self.best_length(alpha, later)
            if k and self.state.seconds > 0:  # adapting beats the best fixed length: hold drafting to its rate
                rate = max(rate, self.state.tokens / self.state.seconds)
            # Optimism under uncertainty (AcceptanceModel.uncertainty): the rate R a fresh step is worth stays
            # the estimate's, but positions after an accepted one are valued at their optimistic rate, and a
            # step is plain only if no length pays even at optimistic rates.
            u_first, u_later = self.model.uncertainty(self.optimism)
            hope = min(later + u_later, 1.0)
            hopeful, hope_rate = self.best_length(min(alpha + u_first, 1.0), hope) if k == 0 else (0, 0.0)
            self._planned = (k, rate, alpha, hope, hopeful)
            self._hoped = (later, hope_rate)  # the continuation's estimate, the hopeful length's rate (probe_pays)
        return self._planned

    def next_lengths(self, left: torch.Tensor) -> torch.Tensor:
        k, self._rate, alpha, hope, hopeful = self._plan()
        self.probing, st = False, self.state
        if hopeful and not self.learns_for_later and not self.probe_pays(hopeful, int(left.max()) + 1):
            hopeful = 0
        if hopeful:  # too little evidence yet to rule drafting out: a probe that leaves the probing gap as it
            # is, as long as the length that would pay at optimistic rates. A one-token probe measured the
            # first position only, so the continuation's optimism never shrank and a pair near the break-even
            # point probed one token a step for good (llama.cpp, seeded, held-out: 400 of 750 steps, 0.75x).
            self.probing, k = True, hopeful
        elif k == 0:
            st.since_probe += 1
            if st.since_probe >= st.probe_gap:  # re-probe: draft; include() lets one position through
                self.probing, st.since_probe = True, 0
                st.probe_gap = min(2 * st.probe_gap, self.max_probe_gap)
                k = 1
        else:
            st.probe_gap = self._first_gap  # drafting pays again: probe soon after it stops paying
        self._alpha, self._later, self._p = alpha, hope, None
        # A model drafter stops itself (include / more) below max_gamma; a model-free one (prompt lookup)
        # finds up to max_gamma tokens (a probe: up to its length) and trim() picks how many the step verifies.
        self._plain = k == 0  # a plain step by decision (not only because no tokens are left)
        cap = (k if self.probing else self.max_gamma) if k else 0
        if cap:  # A batch ends with its slowest row, so the rows with the most left weigh most in its decisions
            w = (left.clamp(min=0) + 1).tolist() if self.weigh_left else [1] * len(left)
            self._w = [x / sum(w) for x in w] if w else w
        return left.clamp(min=0, max=cap)

    def probe_pays(self, k: int, tokens: int) -> bool:
        """Whether an optimistic probe of `k` tokens is worth its expected cost when what it teaches serves only
        the `tokens` this run may still emit (``learns_for_later=False``).

        At the estimates the probe loses ``C = step_time(k) - E(k) step_time(0)`` seconds (E(k): the tokens
        it is expected to emit). What it may find is that the optimistic rates hold (the truth lies at least
        `optimism` standard errors above the estimates, a chance ``P = 1 - Phi(optimism)``: 0.16 at one), and
        then drafting saves ``G = tokens (step_time(0) - 1 / R_hope)`` over the rest of the run, R_hope the best
        length's rate at those rates. It pays when ``P G > C``. A generator's probes also serve its later runs,
        and are not asked this. Seeded runs on llama.cpp probed 5 tokens a step for their first 6-7 steps at
        T = 1, where a near break-even pair lost what 64 tokens could not repay (unseen11: 0.85x our loop,
        2026-12-04)."""
        alpha = self._plan()[2]
        later, r_hope = self._hoped
        e, pw = 1.0, 1.0  # E(k) at the estimates: the first position at alpha, the others at the continuation's
        for j in range(1, k + 1):
            pw *= alpha if j == 1 else later
            e += pw
        cost = self._step[k] - e * self._step[0]
        chance = 0.5 * math.erfc(self.optimism / math.sqrt(2.0))
        return chance * tokens * (self._step[0] - 1.0 / r_hope) > cost

    def plain_streak(self) -> int:
        """After :meth:`next_lengths` made this step plain by decision: how many steps from this one on are
        plain for certain (1 otherwise). Plain steps verify nothing, so the acceptance model does not move
        and only the probe counter decides: the steps until the next probe. The loop may run that many at
        once and tell :meth:`skip_plain`, with the same outcome as asking next_lengths for each."""
        if not self._plain:
            return 1
        return max(1, self.state.probe_gap - self.state.since_probe)

    def skip_plain(self, m: int) -> None:
        """`m` more plain steps ran after this one without asking :meth:`next_lengths` (within the streak)."""
        self.state.since_probe += m

    def include(self, i: int, confidence: torch.Tensor, caps: torch.Tensor) -> torch.Tensor:
        """Which rows draft position i (1-based): `confidence [B]` = max_x q_i(x) per row, `caps [B]` this
        step's caps. Returns `[B]` bool; a row that stops stays stopped for the step.

        A row's position i is priced at what it adds to the step's time. Alone in its step (batch 1) that is
        position i's share of the step, and the row stops when its P no longer pays for it. In a batch, one
        draft forward and one target forward serve every row, padded to the longest: once the batch drafts
        position i (the batch's P pays for it), a row's own position i costs nothing more, so every row
        whose cap allows it drafts it. Stopping rows below the threshold there threw away expected tokens
        at no saving (batch 4, held-out greedy: 2.7-2.8 tokens per row-step against gamma=4's 3.16, r13).
        When the batch's P no longer pays, the whole batch stops. The batch's P weighs each row's P by the
        tokens it has left (with `weigh_left`; else their mean): a batch ends with its slowest row, and
        tokens for a row about to finish do not bring that end nearer."""
        conf = confidence.tolist()
        self.model.see(conf)
        self._planned = None
        acc = self.model.predict(conf)
        if self._p is None:
            self._caps = caps.tolist()
            prev, alive = [1.0] * len(conf), [True] * len(conf)
        else:
            prev, alive = self._p, self._alive
        alive = [al and c >= i for al, c in zip(alive, self._caps)]
        p = [pp * a if al else 0.0 for pp, a, al in zip(prev, acc, alive)]  # P(all so far accepted)
        if self.probing and i == 1:  # a probe verifies at least one position
            ok = alive
        else:
            h = self.threshold(i)
            if self._batch_p(p) <= h:
                ok = [False] * len(p)
            else:  # batch 1: the row's own P decides; a batch: the position is paid for every row
                ok = alive if len(p) > 1 and not self.row_stops else [al and pi > h for al, pi in zip(alive, p)]
        self.early_stops += sum(al and not o for al, o in zip(alive, ok))
        self._p, self._alive = p, ok
        return torch.tensor(ok, dtype=torch.bool, device=confidence.device)

    def _batch_p(self, p: list) -> float:
        """The batch's P: the rows' P weighted by the tokens each has left (their mean when all have as many)."""
        w = self._w if self._w is not None and len(self._w) == len(p) else [1.0 / len(p)] * len(p)
        return sum(wi * pi for wi, pi in zip(w, p))

    def threshold(self, i: int, paid: bool = True) -> float:
        """The least P for which drafting position i pays; P = P(positions < i accepted) x P(position i
        accepted) when position i's draft call is `paid` (its forward produced the confidence), else
        P(positions < i accepted) and position i expected at rate a.

        Drafting on to length L >= i adds P x S(L) expected tokens, S(L) = 1 + a + .. + a^(L-i) with a the
        continuation rate (:meth:`AcceptanceModel.continuation`: acceptance after an accepted position), times
        position i's expected rate when it is not drafted yet, and costs
        C(L) = (L - i + [not paid]) t_draft + V(L) - V(i - 1) more time, V(k) = T_target(k + 1) + the loop's
        overhead of a step verifying k drafted tokens (V(0): a plain step's). At the policy's rate
        R (tokens per second: the best fixed length's under the model, or what this policy's drafting steps
        achieved, priced by the cost model from counts, whichever is higher) that pays iff P > R C(L) / S(L)
        for some L: the threshold is the least of those.
        """
        # positions after i are reached only after accepted ones: priced at the continuation rate
        a, t0 = self._later, self._verify[i - 1]  # stopping before position i verifies i - 1 drafts (none
        # before position 1: a plain step)
        best, s, pw = math.inf, 0.0, 1.0 if paid else (self._alpha if i == 1 else self._later)
        for L in range(i, self.max_gamma + 1):
            s += pw
            pw *= a
            extra = (L - i + (not paid)) * self._t_draft + self._verify[L] - t0
            best = min(best, self._rate * extra / max(s, 1e-300))
        return best

    def more(self, i: int) -> bool:
        """After position i was drafted: is the draft call for position i + 1 expected to pay? Asked before
        that call, so a step whose next position is not worth drafting does not waste a forward on it."""
        if self._p is None or i >= self.max_gamma:
            return False
        go = any(self._alive) and self._batch_p(self._p) > self.threshold(i + 1, paid=False)
        if not go:  # rows still drafting whose cap allowed position i + 1 stop early here
            self.early_stops += sum(al and c > i for al, c in zip(self._alive, self._caps))
        return go

    def trim(self, found: list[int], confidence: list[list[float]] | None = None) -> int:
        """How many of its found tokens each row drafts, for a model-free drafter (prompt lookup), which finds
        every row's continuation (`found [B]`: lengths, within this step's caps) before any is verified, for
        free: the width L that maximises the step's expected tokens over its price,
        (B + sum_b E_b(min(L, found_b))) / step_time(L), E_b(m) = r_1 + r_1 r_2 + .. + r_1 .. r_m with r_j
        position j's rate: its bin's estimate when `confidence [B][found_b]` says what each found token is
        (prompt lookup: its match's length and its distance from it), else the model's mean for the first
        and its continuation rate for the others; L = 0 is a plain step (a probe keeps 1).

        The step is as wide as its longest row, and rows that found nothing pay for that width too. Pricing
        each row as if it drafted alone (the caps of next_lengths) made batch-4 steps 5 wide whenever one
        row had found a repeat, and prompt lookup ran at 0.84-0.91x the target alone (r13). The decision
        reads the rows' histories only (the drafts are functions of them; q is one-hot), so verification
        stays exact. Rows whose found tokens are cut count as early stops."""
        top = max(found, default=0)
        if top == 0:
            return 0
        width_max = min(top, self.max_gamma)
        if confidence is None:
            rates = [[self._alpha] + [self._later] * (width_max - 1)] * len(found)
        else:  # each row's tokens at their bins' rates; the first tokens seen weigh mean() and best()
            firsts = [c[0] for c, f in zip(confidence, found) if f]
            new_bin = any(self.model.seen[b] <= 0 for b in self.model.bins(firsts))
            self.model.see(firsts)
            if new_bin:  # best() may change (mean() is not what a model-free drafter's plan reads)
                self._planned = None
            rates = [self.model.predict(c[:width_max]) for c in confidence]
        cum = []  # per row: E_b(m) for m = 0 .. width_max
        for r in rates:
            e, p, row = 0.0, 1.0, [0.0]
            for x in r:
                p *= x
                e += p
                row.append(e)
            cum.append(row)
        best, rate = 0, len(found) / self._step[0]
        for width in range(1, width_max + 1):
            e = sum(row[min(width, f, len(row) - 1)] for row, f in zip(cum, found))
            r = (len(found) + e) / self._step[width]
            if r > rate * (1 + 1e-9):
                best, rate = width, r
        best = max(best, 1) if self.probing else best
        self.early_stops += sum(f > best for f in found)  # rows whose found tokens were cut
        return best

    def observe(self, draft, accepted: torch.Tensor) -> None:
        """Update the acceptance model from a verdict: position j of row b was reached when j <= n_b + 1.

        `draft.confidence [B, K]` is what the drafter saw at each position; None (a model-free drafter,
        one-hot q) counts every drafted position at confidence 1, seen here since include() was not asked.
        """
        k = draft.tokens.shape[1]
        if k == 0:
            return
        self._planned = None
        st = self.state  # priced from counts, never from clocks: seeded runs reproduce
        st.tokens = 0.98 * st.tokens + float(accepted.double().mean()) + 1.0
        st.seconds = 0.98 * st.seconds + self._step[k]
        lengths, acc = draft.lengths.tolist(), accepted.tolist()
        conf = draft.confidence.tolist() if draft.confidence is not None else None
        if conf is None:  # one-hot q: every drafted position at confidence 1
            self.model.see([1.0] * sum(lengths))
        seen, ok, later = [], [], []
        for b, (length, n) in enumerate(zip(lengths, acc)):
            for j in range(min(length, n + 1)):  # position j + 1 reached: drafted, all before accepted
                seen.append(1.0 if conf is None else conf[b][j])
                ok.append(j < n)
                later.append(j > 0)
        self.model.observe(seen, ok, later)
