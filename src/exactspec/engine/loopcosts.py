"""What a step of the engine's own loop costs at each draft length, and how often the pair's drafts are kept there,
measured once per machine and sampling mode for the stored profile ``gamma="auto"`` starts from
(:func:`exactspec.speed.profiles.stored_cost_model` with ``loop=``; the prices of a run, :func:`auto_cost`)."""
from __future__ import annotations

import statistics

import torch

from exactspec.backends.cache import max_positions
from exactspec.backends.seam import vocab_size
from exactspec.engine.output import GenerationOutput, GenerationStream
from exactspec.engine.hfconfig import SamplingConfig, SamplingSpec
from exactspec.engine.runargs import run_args
from exactspec.speed.costmodel import CostModel

__all__ = ["auto_cost", "loop_acceptance", "loop_priced", "loop_tokens", "calibration_run"]

_ROUNDS = 3  # timed rounds over every length, in turn; each length's price is their median
# The lengths whose steps are timed; 5 and 7 are priced between their neighbours, a longer one on the least-squares
# line through them all (loop_priced). Up to 8: the best fixed gamma of issue 49's cells was between 1 and 6 in
# every round since r26. Seven lengths and three rounds, not nine and five (r28's first form): a profile of a pair of
# tiny test models took 5.9 s in that form, doubling the test suite; a larger target waits in proportion.
LOOP_GAMMAS = (0, 1, 2, 3, 4, 6, 8)
# New tokens a run makes: 32, fewer past 8 rows so that a run makes at most ROW_TOKENS tokens in all (at least
# max(LOOP_GAMMAS) + 4, so that every length's first step drafts in full). At 2,000 rows, 32 tokens a run made the
# first gamma="auto" call of a test price its batch size for 58 s on a pair of tiny models; a step at a large batch
# is mostly arithmetic, so few steps time it.
ROW_TOKENS = 256
# The pair's acceptance (loop_acceptance): seeded runs at a fixed gamma from random prompts of a few tokens, so that
# most of what is verified is the models' own text. On the stdlib pair (llama.cpp, 2026-12-07) 8 runs of 64 tokens
# at gamma = 4 from 4-token prompts counted (first position, continuation) 0.69, 0.79 greedy and 0.71, 0.78 at T = 1,
# where 8 unseen code prompts then kept 0.73 and 0.66 of first positions; from 32-token prompts, 32 tokens: 0.67 and
# 0.56. The prompts' own evidence (8 positions read before r34) was off by +0.05 at T = 1 and -0.08 greedy (r33).
ACCEPT_RUNS, ACCEPT_PROMPT, ACCEPT_TOKENS, ACCEPT_GAMMA = 8, 4, 64, 4


def loop_priced(gen, batch_size: int = 1, *, sampled: bool = False, new_tokens: int | None = None):
    """One price per draft length, each the seconds the engine's own loop took per step at that fixed gamma
    (0: plain steps): a run of `new_tokens` (default :func:`loop_tokens`) on a fixed random prompt of 32 tokens
    per row, greedy or sampled at T = 1, for every gamma of `LOOP_GAMMAS` in turn, `_ROUNDS` rounds after two
    warm-up runs, the median of each length's. Random tokens are accepted at random rates; only the seconds per step are read.

    Why the loop's steps and not the bare forwards: a table of bare forwards did not reproduce on this machine
    (widths 5-11 moved by up to 40% between two measurements in one process, r27, docs/adaptive.md), and the
    loop adds seconds around them that depend on the length (a target forward after k draft calls runs slower
    than a bare one). The loop's steps at gamma = 0 ... 5 moved by under 13% between four measurements (2026-12-06).
    In turn, round by round: a slow minute lands on every length alike.

    As a CostModel: ``t_draft`` one draft call (a step's later calls), ``target_times[k + 1]`` what a k-draft
    step took besides k draft calls, no overhead, so ``step_time(k)`` is the measured step.
    `gen`: a fresh SpeculativeGenerator on the pair with a draft model."""
    new_tokens = loop_tokens(batch_size) if new_tokens is None else new_tokens
    ids = torch.randint(0, vocab_size(gen.target), (batch_size, 32), generator=torch.Generator().manual_seed(0))
    kw = dict(max_new_tokens=new_tokens, eos_token_id=[], seed=0,
              **(dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if sampled else dict(do_sample=False)))
    step: dict = {g: [] for g in LOOP_GAMMAS}  # per gamma, per round: seconds per step
    call: list = []  # per run drafting >= 2 a step: seconds per later draft call
    for g in (0, max(LOOP_GAMMAS)):  # warm-up: the caches, both models' sessions at their widest
        calibration_run(gen, ids, gamma=g, **kw)
    for _ in range(_ROUNDS):
        for g in LOOP_GAMMAS:
            s = calibration_run(gen, ids, gamma=g, **kw).stats
            per = _seconds_per_step(s, g)
            if per is not None:
                step[g].append(per)
            if s.draft_calls > s.draft_steps > 0:
                call.append((s.draft_time - s.draft_first_time) / (s.draft_calls - s.draft_steps))
    price = {g: statistics.median(v) for g, v in step.items() if v}
    timed = {str(g): p for g, p in price.items()}
    t_draft = statistics.median(call) if call else 0.0
    # Past the lengths timed: the least-squares line through every drafting length's price, not the last two
    # (two lengths' noise, extrapolated, priced gamma = 12 at 32 to 48 ms in four measurements of one machine;
    # the line through gamma = 1 ... 8 at 30 to 38)
    gs = [g for g in price if g > 0]
    if not gs:
        raise RuntimeError("the loop made no drafting step at any fixed gamma; it cannot be priced")
    mg, mp = statistics.fmean(gs), statistics.fmean(price[g] for g in gs)
    slope = max(0.0, sum((g - mg) * (price[g] - mp) for g in gs) / max(sum((g - mg) ** 2 for g in gs), 1e-300))
    for g in (gs[-1] + 1, gs[-1] + 2):  # two points: CostModel.t_target goes on along their line
        price[g] = max(price[gs[-1]], mp + slope * (g - mg))
    table = {g + 1: max(p - g * t_draft, 1e-9) for g, p in price.items()}
    return CostModel(t_draft, table, {"loop": "sampled" if sampled else "greedy", "loop_tokens": new_tokens,
                                      "loop_plain_step": price[0], "loop_step": timed,
                                      "repeats": _ROUNDS, "batch_size": batch_size,
                                      "acceptance": loop_acceptance(gen, sampled=sampled)}, 0.0, 0.0, 0.0)


def loop_acceptance(gen, *, sampled: bool = False) -> dict:
    """How often the pair's drafts are kept, what a fresh ``gamma="auto"`` believes before its first verdict
    (:class:`exactspec.engine.policy.AcceptanceModel`): ``first``, the rate of a step's first drafted position, and
    ``later``, of a position reached after an accepted one, counted on ACCEPT_RUNS seeded runs at a fixed gamma,
    each from a random prompt of ACCEPT_PROMPT tokens, in the profile's sampling mode (its law, never the user's:
    see :func:`calibration_run`). Nothing is timed: a function of the models, so seeded runs still reproduce.
    ``verdicts``: the first positions counted. Runs are cut to the shorter model's context (a 64-position model
    failed a user's first call with 4 + 64 tokens)."""
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if sampled else dict(do_sample=False)
    limits = [n for n in (max_positions(gen.target), gen.draft is not None and max_positions(gen.draft)) if n]
    new = max(1, min([ACCEPT_TOKENS] + [n - ACCEPT_PROMPT for n in limits]))
    first = first_n = later = later_n = 0
    for r in range(ACCEPT_RUNS):
        ids = torch.randint(0, vocab_size(gen.target), (1, ACCEPT_PROMPT), generator=torch.Generator().manual_seed(r))
        s = calibration_run(gen, ids, gamma=ACCEPT_GAMMA, max_new_tokens=new, eos_token_id=[], seed=r, **kw).stats
        kept, reached = s.position_accepted, s.position_drafted  # [gamma]: steps keeping / reaching position i + 1
        first, first_n = first + kept[0], first_n + reached[0]
        later, later_n = later + sum(kept[1:]), later_n + sum(reached[1:])
    return {"first": first / max(first_n, 1), "later": later / max(later_n, 1), "verdicts": first_n}


def loop_tokens(batch_size: int) -> int:
    """The new tokens of each pricing run at `batch_size` rows (ROW_TOKENS)."""
    return max(max(LOOP_GAMMAS) + 4, min(32, ROW_TOKENS // max(batch_size, 1)))


def _seconds_per_step(s, gamma: int) -> float | None:
    """A fixed-`gamma` run's seconds per step: plain steps (gamma = 0) over the plain steps that made a forward;
    else the steps that drafted `gamma` tokens with every row running (GenerationStats.gamma_steps: a run's
    last steps draft fewer, capped by the tokens left) with their draft calls at the run's draft seconds per
    step (gamma calls, the first one cold). None when the run made no such step."""
    if gamma == 0:
        made = s.plain_steps - s.prefill_steps
        return s.plain_step_time / made if made > 0 else None
    if len(s.gamma_steps) <= gamma or not s.gamma_steps[gamma]:
        return None
    return s.gamma_seconds[gamma] / s.gamma_steps[gamma] + s.draft_time / s.draft_steps


def calibration_run(gen, input_ids, *, gamma: int, max_new_tokens: int, eos_token_id=None, seed=None,
                    do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
                    ) -> GenerationOutput:
    """A seeded run of `gen` with a fixed `gamma`, or plain steps only with ``gamma=0`` (FixedPolicy(0): the
    draft is never called; ``generate`` takes gamma >= 1). Not through ``gen.stream``, whose wrappers (a CLI's
    interrupt handling) belong to the user's run.

    Its law is built here, greedy or plain temperature sampling, never resolved through the target's
    ``generation_config``: the user's processors (``no_repeat_ngram_size``, ``repetition_penalty``, ``top_p``)
    on a random text of ours filtered every token out of a 10-token vocabulary and failed the user's first
    ``gamma="auto"`` call (issue 49)."""
    law = SamplingConfig(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p)
    cfg = run_args(gen, input_ids, None, max_new_tokens, {}, None, max(gamma, 1), "token", eos_token_id,
                   None, seed, None)
    cfg["spec"] = SamplingSpec(law, cfg["spec"].generator, cfg["spec"].vocab_size, gen.target, max_new_tokens)
    stream = GenerationStream(gen._seeded()._run(**{**cfg, "gamma": gamma}))
    for _ in stream:
        pass
    return stream.output


def auto_cost(gen, batch_size: int, sampled: bool | None = None):
    """What ``gamma="auto"`` prices a run of generator `gen` with: its `cost_model` as given, else the pair's
    profile stored on disk at this batch size (:mod:`exactspec.speed.profiles`), the same for seeded and
    unseeded runs. A plain draft model's chain (`sampled` given) is priced by the loop's own steps at each length
    in that sampling mode (:func:`exactspec.engine.loopcosts.loop_priced`): the bare forwards leave out 0.7-1.5 ms
    of Python a step on llama.cpp beside a 1.5-4 ms forward (docs/llamacpp.md, r6), and drafting priced by them
    lost."""
    from exactspec.engine.drafters import DraftModelDrafter
    from exactspec.speed.profiles import stored_cost_model

    if gen.cost_model is not None:
        return gen.cost_model
    draft = gen.draft if gen.draft is not None else gen.target
    if gen.draft is not None and sampled is not None and type(gen.drafter) is DraftModelDrafter:
        return stored_cost_model(gen.target, draft, batch_size, loop="sampled" if sampled else "greedy",
                                 measure=lambda: loop_priced(type(gen)(gen.target, gen.draft),
                                                             batch_size, sampled=bool(sampled)))
    cm = stored_cost_model(gen.target, draft, batch_size)
    return cm.without_draft() if gen.draft is None else cm
