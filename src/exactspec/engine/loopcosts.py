"""What the engine's own loop costs around the forwards, measured once per machine and sampling mode for the
stored profile ``gamma="auto"`` starts from (:func:`exactspec.speed.profiles.stored_cost_model` with ``loop=``;
:func:`exactspec.engine.policy.auto_cost`)."""
from __future__ import annotations

import statistics

import torch

from exactspec.backends.seam import vocab_size
from exactspec.engine.output import GenerationOutput, GenerationStream
from exactspec.engine.hfconfig import SamplingConfig, SamplingSpec
from exactspec.engine.runargs import run_args
from exactspec.speed.costmodel import CostModel

__all__ = ["loop_priced", "calibration_run"]

_REPEATS = 7  # interleaved pairs of runs, the first warming the caches (about 3 s in all on the stdlib pair)


def loop_priced(gen, batch_size: int = 1, *, sampled: bool = False, new_tokens: int = 32):
    """The forwards' cost profile priced as the engine's loop runs them, all measured now, together: the bare
    forwards (:meth:`CostModel.measure`), then a gamma = 4 run and a run of plain steps, `new_tokens` each on a
    fixed random prompt of 32 tokens per row, greedy or sampled at T = 1, `_REPEATS` times interleaved, all
    but the first (which warms the caches) timed: the speculative runs pooled, the plain runs' median. The
    table is shifted so that a plain step costs what the loop's plain steps took (:meth:`CostModel.calibrate`
    with ``plain_time``), and a speculative step's draft calls and overhead are what the gamma = 4 runs took.
    One moment for all: this machine's speed drifts by up to 1.5x between sessions, and a table measured at
    another moment than the loop mispriced drafting against plain steps. Random tokens are accepted at random rates; only the seconds per call and per step are read.
    `gen`: a fresh SpeculativeGenerator on the pair with a draft model (its runs use fixed lengths: no cost
    model, nothing learnt)."""
    bare = CostModel.measure(gen.target, gen.draft, batch_size=batch_size)
    ids = torch.randint(0, vocab_size(gen.target), (batch_size, 32), generator=torch.Generator().manual_seed(0))
    kw = dict(max_new_tokens=new_tokens, eos_token_id=[], seed=0,
              **(dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if sampled else dict(do_sample=False)))
    spec, plain = [], []
    for rep in range(_REPEATS):
        spec.append(calibration_run(gen, ids, gamma=4, **kw).stats)
        plain.append(calibration_run(gen, ids, gamma=0, **kw).stats)  # plain steps only
    # A plain step's price is the median run's: a run of plain steps is a few tens of ms, and on a shared
    # machine one such run measured 1.6 to 2.3 ms a step among its neighbours (llama.cpp, 2026-12-04), so the
    # mean of two priced a gamma = 5 step at 3.2x to 4.5x a plain one from one profile to the next.
    # (the first plain step's forward is the prefill's: GenerationStats.prefill_steps)
    plain_step = statistics.median(s.plain_step_time / (s.plain_steps - s.prefill_steps) for s in plain[1:])
    cm = bare.calibrate(spec[1:], plain_time=plain_step).to_dict()
    cm["t_overhead_plain"] = 0.0  # a plain step is the shifted T_target(1): what the loop's plain steps took
    cm["metadata"] = {**cm["metadata"], "loop": "sampled" if sampled else "greedy", "loop_tokens": new_tokens,
                      "loop_plain_step": plain_step}
    return CostModel.from_dict(cm)


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
