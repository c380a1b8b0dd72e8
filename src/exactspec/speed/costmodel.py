"""Measured costs of a (target, draft) pair: the time of one draft step and of verifying k tokens.

The paper's model charges ``gamma * c + 1`` target-steps per speculative step, i.e. it assumes verifying
``gamma + 1`` tokens costs as much as decoding one. On CPUs and small batches that is false (a 23M Llama on
2 cores takes ~1.2-1.5x as long for 5 tokens as for 1), so we measure T_target(k) and use it instead.

Two ways to obtain one:

- :meth:`CostModel.measure` times bare forward passes of the two models (no decoding loop around them).
- :meth:`CostModel.calibrate` re-prices it from a real run's :class:`~exactspec.speed.stats.GenerationStats`:
  ``t_draft`` becomes a draft step as it runs inside the loop (where the target's forward has just
  evicted the draft's weights from the CPU caches), and ``t_overhead`` what the loop adds per step
  beyond the forward passes (masks and positions, sampling, verification, KV-cache rollback). The
  speedup predicted from a calibrated model is the one to hold against measured end-to-end speedups.
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping

from exactspec.verification.checks import ArgumentTypeError, check_int, check_real

__all__ = ["CostModel"]

_FORMAT = "exactspec.CostModel/1"
_SHRINK = 8.0  # pseudo-steps at the trend's overhead behind each drafted length's own (calibrate)
_TREND = True  # shrink towards a line in gamma fitted to all lengths (False: towards the pooled overhead)
_MIN_PLAIN_STEPS = 4  # plain steps a run needs before calibrate prices them apart


class CostModel:
    """Measured timings (seconds): ``t_draft`` per draft decoding step, ``target_times[k]`` per target
    forward over k new tokens (with a KV cache over the prompt), ``t_overhead`` per speculative step for
    everything that is not a forward pass, ``t_draft_cold`` the extra cost of a step's first draft call
    (the target's forward has just evicted the draft's weights from the caches); both 0 unless calibrated.
    A step drafting gamma >= 1 tokens costs ``gamma * t_draft + t_draft_cold + T_target(gamma + 1) +
    t_overhead``; a plain step of the loop (gamma = 0: nothing to verify) ``T_target(1) + t_overhead_plain``
    (None, the default: ``t_overhead``; :meth:`calibrate` measures it apart when a run took plain steps,
    which skip the verification path); plain decoding costs ``T_target(1)`` per token.
    ``t_overhead_by_gamma`` ({gamma: seconds}, None by default) replaces ``t_overhead`` for the steps that
    draft gamma tokens, interpolated between the gammas it holds and held flat past its ends: inside the
    loop a target forward made right after gamma draft calls runs slower than a bare one, and more so the
    more draft work came before it (:meth:`calibrate` measures it per gamma).

    ``t_target(k)`` interpolates the table linearly; beyond the largest measured k it extrapolates from the
    last two points (slope clamped at >= 0: verifying more tokens never gets cheaper); below the smallest
    measured k (only possible if the table lacks k = 1) it holds the first value.
    """

    def __init__(self, t_draft: float, target_times: Mapping[int, float], metadata: Mapping | None = None,
                 t_overhead: float = 0.0, t_draft_cold: float = 0.0, t_overhead_plain: float | None = None,
                 t_overhead_by_gamma: Mapping[int, float] | None = None):
        t_draft, t_overhead = _seconds(t_draft, "t_draft"), _seconds(t_overhead, "t_overhead")
        t_draft_cold = _seconds(t_draft_cold, "t_draft_cold")
        if t_overhead_plain is not None:
            t_overhead_plain = _seconds(t_overhead_plain, "t_overhead_plain")
        if not isinstance(target_times, Mapping):
            raise ArgumentTypeError(f"target_times must be a mapping {{k: seconds}}, got {target_times!r}")
        if not target_times:
            raise ValueError("target_times must contain at least one (k, seconds) entry")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ArgumentTypeError(f"metadata must be a mapping or None, got {metadata!r}")
        table: dict[int, float] = {}
        for k, t in target_times.items():
            kk = check_int(f"target_times key {k!r} (a number of tokens k)", k, min=1)
            tf = check_real(f"target_times[{k!r}] (seconds)", t, min=0.0)
            if tf <= 0:
                raise ValueError(f"target_times[{k!r}] must be a positive number of seconds, got {t!r}")
            table[kk] = tf
        self.t_draft = t_draft
        self.t_overhead = t_overhead
        self.t_draft_cold = t_draft_cold
        self._t_overhead_plain = t_overhead_plain
        self.target_times = dict(sorted(table.items()))
        self.metadata = dict(metadata or {})
        if t_overhead_by_gamma is not None and not isinstance(t_overhead_by_gamma, Mapping):
            raise ArgumentTypeError(f"t_overhead_by_gamma must be a mapping {{gamma: seconds}} or None, "
                                    f"got {t_overhead_by_gamma!r}")
        self.t_overhead_by_gamma = None if not t_overhead_by_gamma else dict(sorted(
            (check_int(f"t_overhead_by_gamma key {g!r} (a draft length)", g, min=1),
             _seconds(t, f"t_overhead_by_gamma[{g!r}]")) for g, t in t_overhead_by_gamma.items()))

    def __repr__(self) -> str:
        extra = f", t_overhead={self.t_overhead:.3g}" if self.t_overhead else ""
        extra += f", t_draft_cold={self.t_draft_cold:.3g}" if self.t_draft_cold else ""
        extra += f", t_overhead_plain={self._t_overhead_plain:.3g}" if self._t_overhead_plain is not None else ""
        if self.t_overhead_by_gamma:
            by = ", ".join(f"{g}: {t:.3g}" for g, t in self.t_overhead_by_gamma.items())
            extra += f", t_overhead_by_gamma={{{by}}}"
        return f"CostModel(t_draft={self.t_draft:.3g}, target_times={self.target_times}{extra})"

    def __eq__(self, other) -> bool:
        return (isinstance(other, CostModel) and self.t_draft == other.t_draft
                and self.target_times == other.target_times and self.t_overhead == other.t_overhead
                and self.t_draft_cold == other.t_draft_cold and self.t_overhead_plain == other.t_overhead_plain
                and self.t_overhead_by_gamma == other.t_overhead_by_gamma)

    @property
    def t_overhead_plain(self) -> float:
        """Seconds a plain step of the loop adds to ``T_target(1)`` (``t_overhead`` unless measured apart)."""
        return self.t_overhead if self._t_overhead_plain is None else self._t_overhead_plain

    def overhead(self, gamma: int) -> float:
        """The loop's per-step overhead of a step drafting `gamma` tokens (0: a plain step)."""
        if gamma <= 0:
            return self.t_overhead_plain
        table = self.t_overhead_by_gamma
        if not table:
            return self.t_overhead
        gs, ts = list(table), list(table.values())
        if gamma <= gs[0]:
            return ts[0]
        for (g0, t0), (g1, t1) in zip(zip(gs, ts), zip(gs[1:], ts[1:])):
            if gamma <= g1:
                return t0 + (t1 - t0) * (gamma - g0) / (g1 - g0)
        return ts[-1]

    def loop_overhead(self, stats) -> float:
        """Seconds of per-step overhead a run's steps had under this model (`stats`: a GenerationStats):
        each speculative step at its drafted length (``gamma_history``), each plain step a plain one."""
        if not self.t_overhead_by_gamma or len(stats.gamma_history) != stats.target_calls:
            return stats.target_calls * self.t_overhead + stats.plain_steps * (self.t_overhead_plain - self.t_overhead)
        return sum(self.overhead(g) for g in stats.gamma_history)

    # ------------------------------------------------------------------------------------ queries
    def t_target(self, k: float) -> float:
        """Seconds for one target forward over k tokens (k >= 1)."""
        kf = check_real("k", k, min=1.0)
        ks = list(self.target_times)
        ts = list(self.target_times.values())
        if kf <= ks[0]:
            return ts[0]
        for (k0, t0), (k1, t1) in zip(zip(ks, ts), zip(ks[1:], ts[1:])):
            if kf <= k1:
                return t0 + (t1 - t0) * (kf - k0) / (k1 - k0)
        if len(ks) == 1:
            return ts[0]
        slope = max((ts[-1] - ts[-2]) / (ks[-1] - ks[-2]), 0.0)
        return ts[-1] + slope * (kf - ks[-1])

    @property
    def cost_ratio(self) -> float:
        """The paper's c = t_draft / T_target(1)."""
        return self.t_draft / self.t_target(1)

    def step_time(self, gamma: int, width: int | None = None) -> float:
        """Seconds of one speculative step: gamma draft steps, one target call over gamma + 1 tokens, and
        the loop's own per-step overhead. ``width``: tokens the target verifies when it is not gamma + 1
        (a token tree of n nodes and depth gamma: gamma draft calls, one per depth, and n + 1 tokens)."""
        gamma = check_int("gamma", gamma, min=0)
        cold = self.t_draft_cold if gamma > 0 else 0.0
        return gamma * self.t_draft + cold + self.t_target(gamma + 1 if width is None else width) + self.overhead(gamma)

    def mean_target_time(self, stats) -> float:
        """Seconds of a run's mean target call (`stats`: a GenerationStats) priced at the widths its calls
        had (``width_counts``); at their mean width for statistics without that histogram."""
        calls = sum(stats.width_counts)
        if not calls:
            return self.t_target(stats.target_positions / stats.target_calls)
        return sum(c * self.t_target(w) for w, c in enumerate(stats.width_counts) if c) / calls

    def monotone(self) -> "CostModel":
        """The same model with ``target_times`` made non-decreasing in k (the least-squares isotonic fit,
        pool-adjacent-violators): verifying more tokens cannot cost less, so on a noisy machine a k that
        measured cheaper than a smaller one is noise, and a policy should not chase it."""
        fitted = _isotonic(list(self.target_times.values()))
        return CostModel(self.t_draft, dict(zip(self.target_times, fitted)), self.metadata, self.t_overhead,
                         self.t_draft_cold, self._t_overhead_plain, self.t_overhead_by_gamma)

    def without_draft(self) -> "CostModel":
        """The same target timings with a free draft (t_draft = 0): the cost of a model-free drafter such
        as prompt lookup, whose n-gram search is negligible next to a target call."""
        return CostModel(0.0, self.target_times, self.metadata, self.t_overhead, 0.0, self._t_overhead_plain,
                         self.t_overhead_by_gamma)

    def calibrate(self, stats, plain_time: float | None = None) -> "CostModel":
        """This model re-priced from a real run (`stats`: a GenerationStats, or a list merged together).

        ``t_draft`` becomes the run's draft time per draft call (the later calls of a step; the first, cold
        one's extra time becomes ``t_draft_cold`` when steps drafted more than one token); ``t_overhead``
        the run's target + verification time per target call minus what the bare forwards cost at the
        widths the calls had (``GenerationStats.width_counts``: positions fed per target call). Plain steps
        (the loop's steps that drafted nothing) are priced apart when the run timed them
        (``GenerationStats.plain_step_time``): ``t_overhead`` is then the speculative steps' overhead (the
        given model's when the run made none) and ``t_overhead_plain`` what a plain step adds to
        ``T_target(1)`` (at least 0; from 4 plain steps on, else one overhead for both as before). A run
        without draft-model calls (a model-free drafter) keeps ``t_draft`` and counts its drafting time as
        per-step overhead. ``target_times`` stay the bare forwards, so plain decoding is priced by the bare
        ``T_target(1)``, unless ``plain_time`` is given:
        seconds per token of plain decoding as it runs (e.g. a target-alone loop timed next to the
        speculative run). Then the target table is shifted so that ``T_target(1)`` equals it (the same
        per-call cost added to every k) and ``t_overhead`` is what remains per speculative step, so speedups
        are priced against the plain decoding that was actually measured; and when the loop's step is then
        cheaper than that table at a mean width of 2 or more (t_overhead would be negative), the table's rise
        above ``T_target(1)`` is scaled down to what the loop measured (``target_rise_scale`` in the
        metadata) and t_overhead is 0. Raises ValueError for a run without target calls.
        """
        from exactspec.speed.stats import GenerationStats

        if isinstance(stats, (list, tuple)) and stats and all(isinstance(x, GenerationStats) for x in stats):
            stats = GenerationStats.merge(stats)
        if not isinstance(stats, GenerationStats):
            raise ArgumentTypeError(f"stats must be a GenerationStats or a non-empty list of them, got {stats!r}")
        if not stats.target_calls or not stats.target_positions:
            raise ValueError("calibrate needs the statistics of a run with at least one target call")
        calls = stats.target_calls
        per_step = stats.target_time + stats.verify_time
        cold = 0.0
        # After a run of plain steps (gamma="auto"), a probe's first draft call also feeds the draft every
        # token those steps emitted, a catch-up over up to 64 tokens. Priced as every step's cold call (or,
        # with one call per step, as every call) it made drafting look ruinous and auto stayed on plain steps
        # (held-out T = 1: 172 plain steps where gamma=2 ran 1.2x faster than auto). So with plain steps in
        # the run, a draft call keeps the bare price when every step made only one (a first call, catch-up
        # included), or the probes' own price when that is lower, and the cold extra is capped at one call.
        catch_up = stats.plain_steps > 0
        if stats.draft_calls > stats.draft_steps > 0:
            # The first draft call of a step is the cold one: priced apart, so that the per-call price does
            # not depend on gamma (at gamma = 1 every call would be a cold one).
            t_draft = (stats.draft_time - stats.draft_first_time) / (stats.draft_calls - stats.draft_steps)
            cold = max(0.0, stats.draft_first_time / stats.draft_steps - t_draft)
        elif stats.draft_calls and catch_up and stats.draft_steps:  # one call per step, probes among them
            # A probe's call (catch-up included) costs at least one draft call, so when it measured
            # cheaper than the price the run was given, that price is wrong (e.g. measured on a busy
            # machine), and keeping it would keep auto on plain steps for good.
            t_draft = min(self.t_draft, stats.draft_first_time / stats.draft_steps)
            cold = max(0.0, stats.draft_first_time / stats.draft_steps - t_draft)
        elif stats.draft_calls:  # one call per step: first and later calls cannot be told apart
            t_draft = stats.draft_time / stats.draft_calls
        if catch_up and stats.draft_calls:
            cold = min(cold, t_draft)
        if not stats.draft_calls:  # a model-free drafter (prompt lookup): its search is a per-step cost, not per token
            t_draft, per_step = self.t_draft, per_step + stats.draft_time
        # Plain steps (nothing drafted: no verification, no rollback, exactspec.engine.plainstep) are priced apart
        # from speculative ones when the run timed them (GenerationStats.plain_step_time). One overhead
        # pooled over both priced a plain step dearer and a drafting step cheaper than they ran: prompt
        # lookup at T = 1 drafted width-1 steps at 1.125x a plain step's time for ~1.1 tokens, at 0.92x the
        # target alone where plain steps alone ran at 0.98x (2026-12-02).
        # Only from a few plain steps on: a run's last step is plain when a row has one token left, and at
        # batch > 1 the plain steps after some rows finished are narrower (cheaper) than the batch's; one
        # such step priced a batch-4 run's plain steps 2.9 ms below its speculative ones and the next run
        # went plain (57 steps of 61, 2026-12-02). Never below the bare T_target(1), for the same reason.
        # (a plain first step whose forward was the prefill's took no forward here: GenerationStats.prefill_steps)
        made = stats.plain_steps - stats.prefill_steps
        plain = stats.plain_steps if stats.plain_step_time > 0 and made >= _MIN_PLAIN_STEPS else 0
        spec = calls - plain
        own_plain = stats.plain_step_time / made if plain else None
        step = None if plain_time is None else _seconds(plain_time, "plain_time")  # validated once, used below
        if step == 0.0:
            raise ValueError("plain_time (seconds) must be above 0: no target decodes a token in no time")
        shift = 0.0 if step is None else step - self.t_target(1)
        table = {k: t + shift for k, t in self.target_times.items()}
        if min(table.values()) <= 0:
            # a bare T(1) timed slow beside a wider forward timed fast, by more than plain decoding's whole step
            # (a busy machine: a calibration raised here in the test suite on two workers, 2026-12-07): those
            # widths cost what a plain step does, not nothing
            table = {k: t if t > 0 else step for k, t in table.items()}
        t1 = self.t_target(1) + shift
        plain_over = None if own_plain is None else max(0.0, own_plain - t1)
        scale, overhead = 1.0, self.t_overhead
        if spec:  # (a run of plain steps only keeps the given model's overhead of a speculative step)
            # (plain_step_time holds a plain step's drafting seconds only when no draft model ran, which is
            # when per_step holds the drafting time)
            per_step -= stats.plain_step_time if plain else 0.0
            step = per_step / spec  # target + verification seconds per speculative call, as the loop ran
            width = (stats.target_positions - plain) / spec
            # The bare cost of the widths the calls had (GenerationStats.width_counts), not of their mean:
            # prompt lookup's steps are plain or full (widths 1 and 5), and the table is concave, so
            # T_target(mean width) over-priced them and left the scale below too low (r13). A batch's call
            # is as wide as its longest row; a tree's, its nodes + 1. predict_tree prices the same way. A
            # plain step is width 1.
            bare = (self.mean_target_time(stats) * calls - plain * self.t_target(1)) / spec
            overhead = step - (bare + shift)  # a shifted table interpolates shifted
            # The loop's step can come out cheaper than the shifted bare forwards: the bare table was
            # measured once, before the run, and this VM's speed drifts by up to 25%, which scales what
            # verifying more tokens costs (the table's rise above T_target(1)) rather than shifting it.
            # t_overhead cannot be negative, and clamping it over-priced a held-out step by up to 3 ms of
            # 20 (r13), so the rise is scaled to what the loop measured at its widths instead; plain
            # decoding's price stays put. Only when pricing against measured plain decoding (a
            # prediction), and only over a mean width of 2 or more: gamma="auto"'s own re-pricing between
            # runs keeps the measured table's shape.
            rise = bare - self.t_target(1)
            if overhead < 0 and rise > 0 and plain_time is not None and width >= 2:
                scale = max(0.0, (step - t1) / rise)
                table = {k: t1 + scale * (t - t1) for k, t in table.items()}
                overhead = step - (t1 + scale * rise)
        by_gamma = self._overhead_by_gamma(stats, table, overhead) if spec and scale == 1.0 else None
        meta = {**self.metadata, "calibrated_from": {"target_calls": calls, "draft_calls": stats.draft_calls,
                                                     "plain_steps": plain,
                                                     "mean_target_width": stats.target_positions / calls,
                                                     "plain_time": plain_time, "target_rise_scale": scale,
                                                     "overpriced_per_step": max(0.0, -overhead)}}
        return CostModel(t_draft, table, meta, max(0.0, overhead), cold, plain_over, by_gamma)

    @staticmethod
    def _overhead_by_gamma(stats, table: Mapping[int, float], pooled: float) -> dict[int, float] | None:
        """Per drafted length gamma, what the chain loop's steps of that length took beyond the bare forward
        over gamma + 1 tokens (``GenerationStats.gamma_steps`` / ``gamma_seconds``), each shrunk towards the
        overhead a line through every length's own gives it (weighted by steps, slope >= 0) with _SHRINK
        pseudo-steps, at least 0, made non-decreasing in gamma, then all shifted
        alike so that their mean over the run's speculative steps is `pooled` (the run is priced at what it
        took). None unless the run drafted at least two lengths (a fixed-gamma run has one, which `pooled`
        already is).

        Why: a target forward made right after gamma draft calls runs slower than a bare one, more so the
        more draft work came before it (a target over 4 tokens, 2026-12-02: 5.5 ms bare; 6.5 ms in the
        loop after 3 draft calls; 5.6 back to back, 6.0-6.3 after 3 ms of other work). One overhead pooled
        over a gamma="auto" run's lengths priced its short steps too dear and its long ones too cheap, so
        it drafted longer than paid (unseen prompts, T = 1: about 2.9 tokens a step, where gamma = 2 ran
        faster per token than gamma = 3 or 4)."""
        steps, secs = stats.gamma_steps, stats.gamma_seconds
        seen = [g for g in range(1, len(steps)) if steps[g]]
        if len(seen) < 2:
            return None
        own = {g: secs[g] - steps[g] * _interp(table, g + 1) for g in seen}  # seconds beyond the bare forwards
        prior = _trend(seen, [own[g] / steps[g] for g in seen], [steps[g] for g in seen]) if _TREND else \
            {g: pooled for g in seen}
        fitted = _isotonic([max(0.0, (own[g] + _SHRINK * prior[g]) / (steps[g] + _SHRINK)) for g in seen],
                           [steps[g] + _SHRINK for g in seen])
        # One shift for all, so that the run's speculative steps (gamma_history, as loop_overhead reads them;
        # steps after a row finished included) average the pooled overhead: the run is priced at the seconds
        # it took (with plain steps too few to price apart, `pooled` is the overhead they are priced at too).
        table = dict(zip(seen, fitted))
        by = CostModel(0.0, {1: 1.0}, t_overhead_by_gamma={g: max(v, 0.0) for g, v in table.items()})
        history = [g for g in stats.gamma_history if g > 0] or [g for g in seen for _ in range(steps[g])]
        shift = pooled - sum(by.overhead(g) for g in history) / len(history)
        return {g: max(0.0, v + shift) for g, v in table.items()}

    # ---------------------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "t_draft": self.t_draft,
            "t_overhead": self.t_overhead,
            "t_draft_cold": self.t_draft_cold,
            **({"t_overhead_plain": self._t_overhead_plain} if self._t_overhead_plain is not None else {}),
            **({"t_overhead_by_gamma": {str(g): t for g, t in self.t_overhead_by_gamma.items()}}
               if self.t_overhead_by_gamma else {}),
            "target_times": {str(k): t for k, t in self.target_times.items()},  # JSON keys are strings
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CostModel":
        if not isinstance(d, Mapping) or "t_draft" not in d or "target_times" not in d:
            raise ValueError(f"a cost model dict needs keys 't_draft' and 'target_times', got {_brief(d)}")
        if d.get("format", _FORMAT) != _FORMAT:
            raise ValueError(f"cost model format {d['format']!r} is not {_FORMAT!r}")
        if not isinstance(d["target_times"], Mapping):
            raise ValueError(f"target_times must be a mapping from k to seconds, got {_brief(d['target_times'])}")
        # JSON object keys are strings: "4" -> 4 here (the constructor itself takes integer keys only).
        times = {int(k) if isinstance(k, str) and k.strip().isdigit() else k: t for k, t in d["target_times"].items()}
        by_gamma = d.get("t_overhead_by_gamma")
        if by_gamma is not None and not isinstance(by_gamma, Mapping):
            raise ValueError(f"t_overhead_by_gamma must be a mapping from gamma to seconds, got {_brief(by_gamma)}")
        if by_gamma:
            by_gamma = {int(g) if isinstance(g, str) and g.strip().isdigit() else g: t for g, t in by_gamma.items()}
        return cls(d["t_draft"], times, d.get("metadata"), d.get("t_overhead", 0.0), d.get("t_draft_cold", 0.0),
                   d.get("t_overhead_plain"), by_gamma)

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=2)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CostModel":
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            return cls.from_dict(data)
        except (OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
            raise ValueError(f"cannot read a cost model from {os.fspath(path)!r}: {exc}") from exc

    # -------------------------------------------------------------------------------- measuring
    @classmethod
    def measure(cls, target_model, draft_model, *, prompt_len: int | None = None,
                ks: Iterable[int] | None = None, batch_size: int = 1,
                repeats: int = 7, warmup: int = 2, generator=None, seed: int = 0) -> "CostModel":
        """Time real forward passes of Hugging Face causal LMs with a KV cache (median of ``repeats``).

        Both models run as the engine runs them (:class:`~exactspec.backends.cache.SlotCache`, each through its
        lean forward where it has one; :mod:`exactspec.speed.costmeasure` times them). Each first prefills a
        random prompt of ``prompt_len`` tokens; then each timed call feeds k new tokens on top of that cache
        and rolls them back, so every repeat sees the same context length. ``t_draft`` is one 1-token step
        of the draft; ``target_times[k]`` one k-token step of the target. k = 1 is always measured.
        ``prompt_len`` defaults to 64, less for models whose context cannot hold 64 + max(ks).
        ``generator`` (a torch.Generator) or ``seed`` fixes the prompt tokens. ``ks``: the widths timed, by
        default every one from 1 to 17 (:data:`exactspec.speed.costmeasure.WIDTHS`).
        """
        from exactspec.speed.costmeasure import WIDTHS, measure_forwards

        return cls(*measure_forwards(target_model, draft_model, prompt_len=prompt_len, ks=WIDTHS if ks is None else ks,
                                     batch_size=batch_size, repeats=repeats, warmup=warmup,
                                     generator=generator, seed=seed))


def _isotonic(values: list[float], weights: list[float] | None = None) -> list[float]:
    """The weighted least-squares non-decreasing fit of `values` (pool-adjacent-violators)."""
    blocks: list[list[float]] = []  # [weighted sum, weight, count] of pooled neighbours
    for v, w in zip(values, weights or [1.0] * len(values)):
        blocks.append([v * w, w, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s_, w_, n_ = blocks.pop()
            blocks[-1][0] += s_
            blocks[-1][1] += w_
            blocks[-1][2] += n_
    return [b[0] / b[1] for b in blocks for _ in range(b[2])]


def _trend(xs: list[int], ys: list[float], ws: list[float]) -> dict[int, float]:
    """The weighted least-squares line through (xs, ys), slope at least 0, at each x."""
    sw = sum(ws)
    mx, my = sum(w * x for x, w in zip(xs, ws)) / sw, sum(w * y for y, w in zip(ys, ws)) / sw
    sxx = sum(w * (x - mx) ** 2 for x, w in zip(xs, ws))
    slope = max(0.0, sum(w * (x - mx) * (y - my) for x, y, w in zip(xs, ys, ws)) / sxx) if sxx > 0 else 0.0
    return {x: my + slope * (x - mx) for x in xs}


def _interp(table: Mapping[int, float], k: float) -> float:
    """`table` {k: seconds} at k, as CostModel.t_target reads its table."""
    return CostModel(1.0, table).t_target(k)


def _seconds(v, name: str) -> float:
    return check_real(f"{name} (seconds)", v, min=0.0)


def _brief(x) -> str:
    s = repr(x)
    return s if len(s) <= 80 else s[:77] + "..."
