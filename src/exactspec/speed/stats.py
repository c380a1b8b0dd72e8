"""Statistics of one speculative generation run (returned with the output, never printed).

Two conventions for "accepted length" exist in the wild: vLLM reports accepted *draft* tokens per step,
gpt-fast (and the Leviathan paper's E[tokens]) counts the bonus/corrected token too. Both are reported,
named so they cannot be confused:

- ``mean_accepted_per_step``:  accepted draft tokens per row-step (without the bonus token).
- ``mean_tokens_per_step``:    tokens emitted per row-step (accepted + the corrected/bonus token).

A *row-step* is one row taking part in one target call; with batch size 1 it is one target call.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import torch


@dataclass
class GenerationStats:
    """Counts and timings of a run. All times in seconds.

    Attributes:
        target_calls: target forward passes that verified drafts (the prefill is not counted).
        draft_calls: draft-model forward passes (0 for model-free drafters; prefill not counted).
        row_steps: sum over target calls of the rows taking part.
        drafted_tokens / accepted_tokens: draft tokens proposed / accepted by verification.
        new_tokens: tokens written to the output (after EOS truncation), summed over rows.
        position_drafted[i] / position_accepted[i]: row-steps in which draft position i+1 was reached
            (proposed, with all earlier positions accepted) / accepted.
        gamma_history: tokens drafted at each step (the longest row; 0 for a plain step).
        length_counts[k]: row-steps that drafted k tokens (k < gamma near max_new_tokens, or when a
            model-free drafter found nothing), so predictions can weigh each draft length.
        length_accepted[k][a]: row-steps that drafted k tokens and accepted a of them (gamma="auto" drafts
            long when the draft is confident, so acceptance differs by length; see :meth:`alphas_by_length`).
        target_positions: positions fed to the target over all target calls (K + 1 per call, K the
            longest draft of the batch), so a cost model can price the calls (CostModel.calibrate).
        draft_steps / draft_first_time: steps that called the draft model, and the seconds their first
            draft call took (the cold one, right after the target's forward; part of draft_time).
        plain_steps: target calls that verified no draft token (the policy chose a plain step, or the
            drafter found or kept nothing); gamma_history holds 0 for them. plain_step_time: the seconds
            those steps took outside draft-model calls (their share of target_time and verify_time, and
            of draft_time when no draft model ran: a lookup that found nothing worth verifying); they skip
            verification, so a cost model prices them apart (CostModel.calibrate). prefill_steps: plain
            steps whose forward was the prefill's (1 when the policy decided in the prefill that the first
            step is plain, exactspec.engine.steps.prefill(decide=...); their seconds are in prefill_time), so
            a plain step is priced over plain_steps - prefill_steps.
        early_stops: row-steps whose drafting gamma="auto" stopped before their cap: the draft's
            confidence at a position, or the expected worth of the next draft call, said another token
            was not worth its price.
        tree_nodes: tree nodes verified, summed over row-steps (tree speculation only; a chain's
            position_drafted then counts depths: position i is depth i).
        accepted_depths[a]: row-steps whose accepted path had a nodes (tree speculation).
        rank_reached[d][r] / rank_accepted[d][r]: row-steps in which the sibling of rank r at depth d + 1
            was verified (its parent accepted, the lower ranks rejected) / accepted.
        tree_history: the tree drafted at each step (treemath.tree_label: children per node by depth).
        width_counts[w]: target calls that were fed w positions (a plain step 1, a chain step its longest
            draft + 1, a tree step its nodes + 1), so a cost model prices the calls at the widths they had.
        gamma_steps[k] / gamma_seconds[k]: the chain loop's speculative steps that drafted k tokens (the
            longest row) while every row of the batch was still running, and their seconds outside
            draft-model calls (target forward, verification, rollback): a target forward right after k
            draft calls runs slower than one right after another forward, and more so the more draft work
            came before it, so a cost model prices each k apart (CostModel.calibrate:
            ``t_overhead_by_gamma``). Steps after a row finished are narrower, hence cheaper, and would mix
            the batch's shrinking into the price of k.
        step_rows: per target call, ``[row, k, a]`` for each row taking part (its index in the run's
            input_ids, drafted k, accepted a; merged runs concatenate), and row_tokens[r] the tokens row r
            emitted: a batch's rows differ (one finds repeats for prompt lookup, another none), they share
            each step's width, and the slowest sets the batch's pace (what row set it, step by step; the
            prediction, exactspec.speed.prediction.predict_batch, needs only the counts).
    """

    target_calls: int = 0
    draft_calls: int = 0
    row_steps: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    new_tokens: int = 0
    position_drafted: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    gamma_history: list[int] = field(default_factory=list)
    length_counts: list[int] = field(default_factory=list)
    length_accepted: list[list[int]] = field(default_factory=list)
    target_positions: int = 0
    draft_steps: int = 0
    draft_first_time: float = 0.0
    plain_steps: int = 0
    plain_step_time: float = 0.0
    prefill_steps: int = 0
    early_stops: int = 0
    prefill_time: float = 0.0
    draft_time: float = 0.0
    target_time: float = 0.0
    verify_time: float = 0.0
    total_time: float = 0.0
    tree_nodes: int = 0
    accepted_depths: list[int] = field(default_factory=list)
    rank_reached: list[list[int]] = field(default_factory=list)
    rank_accepted: list[list[int]] = field(default_factory=list)
    tree_history: list[str] = field(default_factory=list)
    width_counts: list[int] = field(default_factory=list)
    gamma_steps: list[int] = field(default_factory=list)
    gamma_seconds: list[float] = field(default_factory=list)
    step_rows: list[list[list[int]]] = field(default_factory=list)
    row_tokens: list[int] = field(default_factory=list)

    # ------------------------------------------------------------------------------ derived
    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (0 when nothing was drafted)."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def per_position_acceptance(self) -> list[float]:
        """alpha_i = P(position i accepted | positions < i accepted), estimated from counts."""
        return [a / d if d else 0.0 for a, d in zip(self.position_accepted, self.position_drafted)]

    def alphas_by_length(self) -> list[list[float]]:
        """``[lengths, positions]``: per drafted length k (row k), P(position i accepted | positions < i
        accepted) among the row-steps that drafted k; the pooled per-position rate where a length has no
        such steps (and past k, where it is never read)."""
        pooled = self.per_position_acceptance
        k_max = max(len(pooled), len(self.length_accepted) - 1, 1)
        pooled = pooled + [pooled[-1] if pooled else 0.0] * (k_max - len(pooled))
        out = []
        for k in range(len(self.length_accepted)):
            hist = self.length_accepted[k]
            row = list(pooled)
            for i in range(1, k + 1):  # reached position i: accepted >= i - 1
                reached = sum(hist[i - 1:])
                if reached:
                    row[i - 1] = sum(hist[i:]) / reached
            out.append(row)
        return out

    @property
    def mean_accepted_per_step(self) -> float:
        """Accepted draft tokens per row-step, WITHOUT the bonus/corrected token (vLLM convention)."""
        return self.accepted_tokens / self.row_steps if self.row_steps else 0.0

    @property
    def mean_tokens_per_step(self) -> float:
        """Tokens emitted per row-step, WITH the bonus/corrected token (gpt-fast / paper convention)."""
        return self.new_tokens / self.row_steps if self.row_steps else 0.0

    @property
    def tokens_per_target_call(self) -> float:
        """Tokens emitted per target call (all rows together)."""
        return self.new_tokens / self.target_calls if self.target_calls else 0.0

    @property
    def rank_acceptance(self) -> list[list[float]]:
        """Measured conditional acceptance per (depth, sibling rank) (0 where never verified)."""
        return [[a / r if r else 0.0 for a, r in zip(acc, rea)]
                for acc, rea in zip(self.rank_accepted, self.rank_reached)]

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.total_time if self.total_time > 0 else 0.0

    def to_dict(self) -> dict:
        """Plain-JSON form with the derived quantities included."""
        d = asdict(self)
        for name in ("acceptance_rate", "per_position_acceptance", "mean_accepted_per_step",
                     "mean_tokens_per_step", "tokens_per_second", "tokens_per_target_call", "rank_acceptance"):
            d[name] = getattr(self, name)
        return d

    @classmethod
    def merge(cls, runs) -> "GenerationStats":
        """The statistics of several runs taken together: counts, per-position and per-length counts and
        times add up; gamma histories are concatenated."""
        out = cls()
        for run in runs:
            for f in fields(cls):
                mine, theirs = getattr(out, f.name), getattr(run, f.name)
                if f.name in ("gamma_history", "tree_history", "step_rows"):
                    mine.extend(theirs)
                elif isinstance(mine, list):
                    _add_into(mine, theirs)
                else:
                    setattr(out, f.name, mine + theirs)
        return out

    # ------------------------------------------------------------------------------ updating
    def record_draft(self, draft) -> None:
        """Count one proposal (an :class:`exactspec.engine.drafters.Draft`): its draft-model calls, the first
        (cold) call's seconds, its length (gamma_history) and whether the step is a plain one."""
        self.draft_calls += draft.calls
        if draft.calls:
            self.draft_steps += 1
            self.draft_first_time += draft.first_call_time
        k = int(draft.lengths.max()) if draft.lengths.numel() else 0
        self.gamma_history.append(k)
        self.plain_steps += k == 0

    def record_tree(self, accepted: list[int], reached: list[list[tuple[int, int]]], nodes: int) -> None:
        """Count one tree verification: per row its accepted path length and the (depth, rank) pairs it
        verified, with the accepted ones last in each depth (see rank_reached); `nodes` verified in all."""
        self.tree_nodes += nodes
        for a, pairs in zip(accepted, reached):
            _bump(self.accepted_depths, a)
            for d, r, ok in pairs:
                while len(self.rank_reached) <= d:
                    self.rank_reached.append([])
                    self.rank_accepted.append([])
                _bump(self.rank_reached[d], r)
                _bump(self.rank_accepted[d], r, int(ok))

    def smoothed_rank_acceptance(self, max_depth: int, prior_weight: float = 2.0, prior=None,
                                 default_side: float = 0.3) -> list[list[float]]:
        """Acceptance per (depth, rank) for planning trees, shrunk towards `prior[d][r]` (earlier runs;
        the last row/column repeats) or, without one, towards the rate pooled over depths for that rank
        (rank 0 starts from the chain's pooled rate, later ranks from `default_side`)."""
        ranks = max([len(r) for r in self.rank_reached] + [len(p) for p in (prior or [])] + [4])
        pooled = []
        for r in range(ranks):
            a = sum(row[r] for row in self.rank_accepted if r < len(row))
            n = sum(row[r] for row in self.rank_reached if r < len(row))
            if r == 0:
                a += sum(self.position_accepted)
                n += sum(self.position_drafted)
            base = (a + 1.0) / (n + 2.0) if r == 0 else (a + prior_weight * default_side) / (n + prior_weight)
            pooled.append(base)
        out = []
        for d in range(max_depth):
            row = []
            for r in range(ranks):
                n = self.rank_reached[d][r] if d < len(self.rank_reached) and r < len(self.rank_reached[d]) else 0
                a = self.rank_accepted[d][r] if d < len(self.rank_accepted) and r < len(self.rank_accepted[d]) else 0
                if prior:
                    pr = prior[min(d, len(prior) - 1)]
                    target = pr[min(r, len(pr) - 1)]
                else:
                    target = pooled[r]
                row.append((a + prior_weight * target) / (n + prior_weight))
            out.append(row)
        return out

    def record_step_time(self, gamma: int, seconds: float) -> None:
        """A speculative chain step that drafted `gamma` tokens took `seconds` outside draft-model calls."""
        _bump(self.gamma_steps, gamma)
        if gamma >= len(self.gamma_seconds):
            self.gamma_seconds.extend([0.0] * (gamma + 1 - len(self.gamma_seconds)))
        self.gamma_seconds[gamma] += seconds

    def record_plain(self, rows: int, row_ids: list[int] | None = None) -> None:
        """Count one plain step of `rows` rows (one position fed, nothing drafted): what record_step counts
        for all-zero draft lengths, without its tensor work (exactspec.engine.plainstep). `row_ids`: the rows'
        indices in the run's batch."""
        self.target_calls += 1
        self.target_positions += 1
        _bump(self.width_counts, 1)
        self.row_steps += rows
        if not self.length_counts:
            self.length_counts.append(0)
        self.length_counts[0] += rows
        if not self.length_accepted:
            self.length_accepted.append([0])
        self.length_accepted[0][0] += rows
        if row_ids is not None:
            self.step_rows.append([[r, 0, 0] for r in row_ids])

    def record_step(self, draft_lengths, accepted, fed: int | None = None,
                    row_ids: list[int] | None = None) -> None:
        """Count one verification: `draft_lengths [B]`, `accepted [B]` (lists of ints, or int64 tensors) for
        the rows taking part; `fed`: positions the target call was fed (default: the longest draft + 1);
        `row_ids`: the rows' indices in the run's batch (per-row counts are kept only when given).

        Counted in Python: the engine calls it every step with a handful of rows, and on a small target each
        tensor op right after a forward costs several times its own time (exactspec.engine.steps.emit)."""
        lengths = draft_lengths.tolist() if isinstance(draft_lengths, torch.Tensor) else list(draft_lengths)
        accs = accepted.tolist() if isinstance(accepted, torch.Tensor) else list(accepted)
        k = max(lengths, default=0)
        fed = fed if fed is not None else k + 1
        self.target_calls += 1
        self.target_positions += fed
        _bump(self.width_counts, fed)
        self.row_steps += len(lengths)
        self.drafted_tokens += sum(lengths)
        self.accepted_tokens += sum(accs)
        for length, acc in zip(lengths, accs):
            _bump(self.length_counts, length)
            _bump_length(self.length_accepted, length, acc)
        if row_ids is not None:
            self.step_rows.append([[r, k_, a] for r, k_, a in zip(row_ids, lengths, accs)])
        while len(self.position_drafted) < k:
            self.position_drafted.append(0)
            self.position_accepted.append(0)
        # Position i (from 1) is reached when it was drafted and all earlier ones were accepted.
        for length, acc in zip(lengths, accs):
            for i in range(min(length, acc + 1)):
                self.position_drafted[i] += 1
            for i in range(min(length, acc)):
                self.position_accepted[i] += 1

def _bump_length(table: list[list[int]], length: int, acc: int) -> None:
    """table[length][acc] += 1 in a triangular [k][a] table (a <= k), grown as needed."""
    while len(table) <= length:
        table.append([0] * (len(table) + 1))
    table[length][acc] += 1


def _bump(counts: list[int], i: int, by: int = 1) -> None:
    if i >= len(counts):
        counts.extend([0] * (i + 1 - len(counts)))
    counts[i] += by


def _add_into(mine: list, theirs: list) -> None:
    """Element-wise mine += theirs for (nested) count lists of any lengths."""
    for i, v in enumerate(theirs):
        if i >= len(mine):
            mine.append([] if isinstance(v, list) else 0)
        if isinstance(v, list):
            _add_into(mine[i], v)
        else:
            mine[i] += v
