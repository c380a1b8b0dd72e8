"""SpeculativeGenerator: exact, batched speculative decoding for Hugging Face causal LMs.

One step, for the B rows still generating:

1. the drafter proposes up to k_b tokens per row (k_b = min(gamma, tokens left - 1), so a step can never
   overshoot ``max_new_tokens``), with the distributions q they were drawn from;
2. the target runs ONE forward over [pending token, d_1 .. d_K] (K + 1 positions, ragged rows masked);
3. :func:`exactspec.verification.rules.verify` applies the exact rule ("token", "block" or "greedy") and returns the
   accepted count n_b and the corrected/bonus token per row;
4. both KV caches keep what each row accepted (the session's ``keep``, :mod:`exactspec.backends.seam`; on
   transformers: crop to the longest accepted run in the batch, mask the other rows' rejected slots as holes,
   keep explicit per-row positions). Nothing is recomputed. Finished rows leave the batch.

The target never sees its own last emitted token until the next step (it is "pending"): so the prefill
is the prompt minus its last token and every target call is a verification producing >= 1 token.
"""
from __future__ import annotations

import copy
import time

import torch
import torch.nn.functional as F

from exactspec.backends.cache import sync as _sync
from exactspec.backends.seam import check_same_vocab, is_backend_model, supports_trees
from exactspec.verification.checks import ArgumentTypeError, check_bool, check_int
from exactspec.engine.drafters import Draft, DraftModelDrafter, PromptLookupDrafter
from exactspec.engine.hfconfig import Prefixes, SamplingSpec
from exactspec.engine.loopcosts import auto_cost
from exactspec.engine.policy import AdaptivePolicy, DraftingState, FixedPolicy
from exactspec.engine.output import GenerationOutput, GenerationStream, StreamStep
from exactspec.engine.plainstep import PLAIN_RUN, plain_step, tell_drafter
from exactspec.speed.stats import GenerationStats
from exactspec.verification.rules import greedy_verdict, verify
from exactspec.engine.runargs import _check_causal_lm, run_args
from exactspec.engine.steps import emit, emitted_counts, prefill
from exactspec.engine.treepolicy import auto_runs_tree, learn_from_chain
from exactspec.engine.trees import parse_tree, run_tree

__all__ = ["SpeculativeGenerator", "GenerationOutput", "StreamStep", "GenerationStream"]


class SpeculativeGenerator:
    """Exact speculative decoding with a draft model or a model-free drafter.

    Args:
        target: a transformers causal LM with a KV cache (Llama, Qwen2, GPT-2, ...; sliding-window models
            such as Mistral or Gemma 2/3 too, see :mod:`exactspec.backends.cache`), loaded from a directory or a GGUF.
        draft: a smaller causal LM sharing the target's tokenizer (lm-head widths may differ by padding),
            on the target's device; its dtype may differ (e.g. a bf16 draft for an fp32 target): its
            distributions are taken in fp32, and exactness never depends on how good q is. Or a
            :class:`exactspec.pairs.featuredraft.FeatureDraft`, which reads the target's final hidden states
            (EAGLE-style; chains only, Llama-like targets).
        drafter: instead of `draft`: ``"prompt_lookup"`` or a drafter object (e.g.
            ``PromptLookupDrafter(max_ngram=3, max_draft=10)``).
        cost_model: a :class:`exactspec.CostModel` for ``gamma="auto"``; when omitted, the pair's cost profile
            stored on disk, measured once per machine, batch size and sampling mode (:mod:`exactspec.speed.profiles`).
        max_gamma: the longest draft ``gamma="auto"`` may make in a step. ``gamma="auto"`` carries what it
            learns (acceptance by draft confidence, probing state) from run to run of this generator, per
            sampling setting and rule; a fresh generator starts from a neutral guess.
        calibrate: no longer used (kept so that code passing it runs): ``gamma="auto"`` prices every run from
            `cost_model` or the stored profile and re-prices nothing from its runs' clocks (docs/adaptive.md).
        tokenizer, draft_tokenizer: optional; when both are given their vocabularies must agree
            (see :meth:`check_tokenizers`).
    """

    def __init__(self, target, draft=None, *, drafter=None, cost_model=None, max_gamma: int = 12,
                 calibrate: bool = True, tokenizer=None, draft_tokenizer=None):
        _check_causal_lm(target, "target")
        max_gamma = check_int("max_gamma", max_gamma, min=1)
        check_bool("calibrate", calibrate)  # (accepted and checked, no longer used)
        from exactspec.speed.costmodel import CostModel

        if cost_model is not None and not isinstance(cost_model, CostModel):
            raise ArgumentTypeError(f"cost_model must be a CostModel or None, got {cost_model!r}")
        if drafter is not None and not isinstance(drafter, str) and not all(
                callable(getattr(drafter, m, None)) for m in ("start", "propose", "update", "select_rows")):
            raise ArgumentTypeError(f"drafter must be 'prompt_lookup' or a drafter object (start, propose, "
                                    f"update, select_rows), got {drafter!r}")
        if tokenizer is not None and draft_tokenizer is not None:
            self.check_tokenizers(tokenizer, draft_tokenizer)
        if draft is not None and drafter is not None:
            raise ValueError("pass either draft (a model) or drafter, not both")
        if isinstance(drafter, str):
            if drafter != "prompt_lookup":
                raise ValueError(f"drafter must be 'prompt_lookup' or a drafter object, got {drafter!r}")
            drafter = PromptLookupDrafter()
        if callable(getattr(draft, "make_drafter", None)):  # a draft that drafts its own way (a feature draft
            if is_backend_model(target):  # reads the target's hidden states, which only torch models hand over
                raise ValueError("draft: a feature draft reads the target's hidden states, which the "
                                 f"{target.backend} backend does not give; use a token draft model")
            drafter = draft.make_drafter()  # reads the target's features); costed and checked as the LM it runs
            draft = drafter.model.lm
        elif draft is not None:
            drafter = DraftModelDrafter(draft)
        if draft is not None:
            _check_causal_lm(draft, "draft")
            if draft.device != target.device:
                raise ValueError(f"draft is on {draft.device} but target is on {target.device}")
            check_same_vocab(target, draft)
            if draft is target and getattr(target, "backend", None):  # one context runs one session at a time
                raise ValueError("draft: the target model itself; a llama.cpp model runs one session at a time, "
                                 "so load the file a second time for the draft")
        for name, model in (("target", target), ("draft", draft)):
            if model is not None and model.training:  # dropout would make outputs random and inexact
                raise ValueError(f"{name} is in training mode (dropout active); call {name}.eval() first")
        if drafter is None:
            raise ValueError("a draft model or a drafter is required (draft=... or drafter='prompt_lookup')")
        self.target, self.draft, self.drafter = target, draft, drafter
        self.cost_model, self.max_gamma = cost_model, max_gamma
        # What gamma="auto" learnt in earlier runs of this generator, per sampling setting and rule: the
        # acceptance model and the probing state (see exactspec.engine.policy).
        self._drafting: dict[tuple, DraftingState] = {}
        self._tree_priors: dict[tuple, list] = {}  # tree="auto": acceptance per (depth, rank), per setting
        self._tree_speedup: dict[tuple, float] = {}  # tree="auto": what its tree and chain runs achieved

    @staticmethod
    def check_tokenizers(tokenizer, draft_tokenizer) -> None:
        """Raise ValueError unless both tokenizers map every token string to the same id."""
        for name, tok in (("tokenizer", tokenizer), ("draft_tokenizer", draft_tokenizer)):
            if not callable(getattr(tok, "get_vocab", None)):
                raise ArgumentTypeError(f"{name} must be a transformers tokenizer, got {tok!r}")
        a, b = tokenizer.get_vocab(), draft_tokenizer.get_vocab()
        diff = [t for t in a.keys() | b.keys() if a.get(t) != b.get(t)]
        if diff:
            ex = ", ".join(f"{t!r}: {a.get(t)} vs {b.get(t)}" for t in sorted(diff)[:5])
            raise ValueError(f"draft_tokenizer differs from the target tokenizer on {len(diff)} tokens "
                             f"({ex}); speculative decoding needs a shared vocabulary")

    # ------------------------------------------------------------------------------------ public
    def generate(self, input_ids, attention_mask=None, **kwargs) -> GenerationOutput:
        """Generate; same arguments as :meth:`stream`. Returns a :class:`GenerationOutput`."""
        stream = self.stream(input_ids, attention_mask, **kwargs)
        for _ in stream:
            pass
        return stream.output

    def stream(self, input_ids, attention_mask=None, *, max_new_tokens: int, do_sample: bool | None = None,
               temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
               min_p: float | None = None, gamma="auto", method: str = "token", eos_token_id=None,
               pad_token_id=None, seed=None, generator=None, generation_config=None, tree=None,
               **generation_kwargs) -> GenerationStream:
        """Generate step by step. Returns an iterable of :class:`StreamStep` whose ``.output`` is set at the end.

        Args:
            input_ids: `[B, P]` int64, left-padded (HF convention for decoder-only models).
            attention_mask: `[B, P]`, 1 for real tokens (default: all ones).
            max_new_tokens: exact number of new tokens per row unless EOS comes first.
            do_sample / temperature / top_k / top_p / min_p, and any other ``GenerationConfig`` setting as
                a keyword (``repetition_penalty=``, ``no_repeat_ngram_size=``, ``min_new_tokens=``, ...):
                None (the default) takes the value from `generation_config`, else the target's
                ``generation_config``, resolved exactly as ``target.generate(**same arguments)`` does
                (:class:`exactspec.engine.hfconfig.SamplingConfig`): so decoding is greedy unless the config or
                ``do_sample=True`` says otherwise, and sampling uses transformers' default ``top_k=50``
                unless the config sets ``top_k``. p at every position is what transformers' own logits
                processors give with that position's prefix. ``temperature=0`` or ``method="greedy"``
                force greedy decoding, which reproduces ``target.generate(do_sample=False)`` token for token.
            gamma: ``"auto"`` (default: :class:`exactspec.engine.policy.AdaptivePolicy` drafts while drafting pays,
                stops a step early when the draft's confidence says another token does not pay, and takes
                plain target steps when no length pays) or a fixed number of draft tokens per step (>= 1).
            method: verification rule: "token" (Leviathan et al.), "block" (Sun et al. 2024) or "greedy".
                In greedy mode "token"/"block" act on one-hot distributions, where they reduce to greedy.
            eos_token_id: int or list; None uses ``target.generation_config.eos_token_id``; [] disables.
            pad_token_id: filler after EOS; None uses the generation config's pad (else EOS, else 0).
            seed: the same tokens for the same arguments and seed: in any process on this machine and build,
                and on a generator that has run before, for every drafting mode (fixed gamma, "auto", block,
                prompt lookup, trees, B > 1). A seeded run seeds its one torch.Generator (draft sampling and
                verification) and decides from nothing timed in this process and nothing learnt by earlier
                runs: ``gamma="auto"`` starts from a fresh acceptance model and prices with `cost_model` as
                given, else with the pair's cost profile stored on disk (:mod:`exactspec.speed.profiles`).
                It learns nothing back. A drafter object of your own reproduces if it draws only from the
                generator it is handed. See docs/generation.md ("Seeds").
            generator: a ``torch.Generator`` on the target's device to draw from instead (not with `seed`):
                no reproduction promise; ``gamma="auto"`` uses what this generator learnt, as an unseeded run.
            tree: tree speculation instead of a chain (replaces `gamma`; needs a draft model): a tuple of
                branching factors per depth (``(3, 2, 1, 1)``), an int node budget (a dynamic tree) or
                ``"auto"``; see :mod:`exactspec.engine.trees`. Verification is the exact multi-round rule.
        """
        sampling = dict(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                        **generation_kwargs)
        cfg = run_args(self, input_ids, attention_mask, max_new_tokens, sampling, generation_config, gamma,
                       method, eos_token_id, pad_token_id, seed, generator)
        if tree is not None and not getattr(self.drafter, "drafts_trees", True):
            raise ValueError("tree: a feature draft (FeatureDraft) drafts chains only; drop tree= or pass a "
                             "token draft model")
        cfg["tree"] = parse_tree(tree, has_draft=self.draft is not None, method=method)
        if cfg["tree"] is not None and not all(supports_trees(m) for m in (self.target, self.draft) if m is not None):
            raise ValueError("tree: a model here verifies chains only (its backend has no forward_tree); drop "
                             "tree= or run the models on transformers or llama.cpp")
        if cfg["tree"] is not None and not cfg["spec"].static_only:
            raise ValueError("tree: tree speculation takes the target's law row by row; generation settings "
                             "that depend on the prefix (repetition_penalty, no_repeat_ngram_size, bad_words_ids, "
                             "min_new_tokens, ...) need a chain: drop tree= or those settings")
        runner = self if seed is None else self._seeded()
        return GenerationStream(runner._run(**cfg))

    def _seeded(self) -> "SpeculativeGenerator":
        """What a seeded run runs on: this generator with nothing learnt (a fresh acceptance model, no tree
        priors); its prices, as every run's, are `cost_model` as given or the stored profile, which no clock of
        this process decides. A shallow copy: the models and the drafter are shared, its learning is not."""
        view = copy.copy(self)
        view._drafting, view._tree_priors, view._tree_speedup = {}, {}, {}
        return view

    # ---------------------------------------------------------------------------------- gamma
    def _cost_model(self, batch_size: int, sampled: bool | None = None):
        """What gamma="auto" prices a run with (exactspec.engine.loopcosts.auto_cost)."""
        return auto_cost(self, batch_size, sampled)

    def _policy(self, gamma, batch_size: int, key: tuple):
        """FixedPolicy(gamma), or for "auto" an AdaptivePolicy with this generator's acceptance model for
        this sampling setting and rule (carried from run to run) and the run's fixed prices."""
        if gamma != "auto":
            return FixedPolicy(gamma)
        return AdaptivePolicy(self._cost_model(batch_size, sampled=not key[0]), self.max_gamma,
                              self._drafting.setdefault(key, DraftingState()), free_draft=self.draft is None)

    # ------------------------------------------------------------------------------------ loop
    # inference_mode, not no_grad: no version counters or view tracking per op, ~10% of a small target's
    # step on a CPU; the stream hands the caller ordinary copies of the output (exactspec.engine.output._normal)
    @torch.inference_mode()
    def _run(self, ids, mask, max_new, spec: SamplingSpec, gamma, method, eos, pad, tree=None):
        device, b = ids.device, ids.shape[0]
        stats = GenerationStats()
        prior_key = (spec.greedy, spec.temperature, spec.top_k, spec.top_p, method)
        chain_for_tree = tree == "auto" and max_new > 0 and not auto_runs_tree(self, b, prior_key)
        if chain_for_tree:  # trees do not pay here: the gamma="auto" chain (exactspec.engine.treepolicy)
            tree, gamma = None, "auto"
        if tree is not None:  # tree speculation: exactspec.engine.trees runs the steps (TreeStepper.step / commit)
            return (yield from run_tree(self, ids, mask, max_new, spec, tree, eos, pad, prior_key))
        out = torch.full((b, max_new), pad, dtype=torch.long, device=device)  # [B, max_new]
        from_draft = torch.zeros(b, max_new, dtype=torch.bool, device=device)
        n_gen = torch.zeros(b, dtype=torch.long, device=device)
        eos_ids = frozenset(eos.tolist())
        # Before the clock starts: gamma="auto" may first measure a cost model, which is not generation time.
        policy = self._policy(gamma, b, prior_key) if max_new > 0 else FixedPolicy(1)
        t_start, suspended = time.perf_counter(), 0.0
        active = torch.arange(b, device=device) if max_new > 0 else torch.zeros(0, dtype=torch.long)
        # A per-run copy: drafters keep per-run state, and two streams of one generator may interleave.
        drafter = copy.copy(self.drafter)
        caps = first = None
        if max_new > 0:
            # The first step decided in the prefill: a plain one rides it
            decide = None if getattr(drafter, "wants_target_features", False) else \
                (lambda: policy.next_lengths(max_new - n_gen - 1))  # [B]
            target, pending, first, caps = prefill(self.target, drafter, ids, mask, lazy=True, decide=decide)
            stats.prefill_time = time.perf_counter() - t_start
            stats.prefill_steps = int(first is not None)
        while active.numel():
            whole = active.numel() == b  # every row still running (steps priced per drafted length: see stats)
            if caps is None:
                caps = policy.next_lengths(max_new - n_gen[active] - 1)  # [B]; all 0: a plain target step
            t0 = time.perf_counter()
            # (a plain step asks nothing of the drafter, so its time is the plain step's, not drafting's)
            draft = drafter.propose(caps, spec, policy) if bool(caps.any()) else Draft.empty(len(caps), device)
            caps = None
            stats.record_draft(draft)
            _sync(device)
            t1 = time.perf_counter()
            if draft.prefill_time:  # the draft's deferred prompt (prefill(lazy=True)): prefill, not drafting
                stats.prefill_time += draft.prefill_time
                t0 += draft.prefill_time
            big_k = draft.tokens.shape[1]
            if big_k == 0:  # a plain step: no draft to verify, so the lean path (exactspec.engine.plainstep),
                # a streak of them when the policy has committed to one (the same tokens, counted per step)
                # (not for a feature drafter: it reads the target's features of the last forward only)
                streak = 1 if draft.calls or getattr(drafter, "wants_target_features", False) else \
                    min(policy.plain_streak(), PLAIN_RUN)
                made, step = plain_step(target, spec, pending, Prefixes(ids, mask, out, n_gen, active),
                                        eos, max_new, stats, streak, first)
                done = list(step.finished)  # (the caller may edit its step; the loop reads this after the yield)
                first = None
                if made.shape[1] > 1:
                    policy.skip_plain(made.shape[1] - 1)
                    for _ in range(made.shape[1] - 1):
                        stats.record_draft(draft)
                nxt = made[:, -1]
                n = torch.zeros_like(nxt)
                _sync(device)
                t_plain = time.perf_counter() - t1
                stats.target_time += t_plain
                # the plain step's seconds outside draft-model calls (which are priced per call): a lookup
                # that found nothing worth verifying is this step's cost
                stats.plain_step_time += t_plain + (t1 - t0 if not draft.calls else 0.0)
            else:
                pos = torch.arange(big_k + 1, device=device)[None, :]  # [1, K+1]
                inp = torch.cat([pending[:, None], draft.tokens], 1)  # [B, K+1]
                start = target.length
                logits = target.forward(inp, pos <= draft.lengths[:, None])  # [B, K+1, V]
                _sync(device)
                t2 = time.perf_counter()
                # p [B, K+1, V] through transformers' processors, each position with its own prefix (when
                # greedy: scores whose argmax is generate()'s choice, the logits themselves if no processor)
                law = spec.target_law(logits, draft.tokens, draft.lengths, Prefixes(ids, mask, out, n_gen, active))
                if spec.greedy:  # on one-hot targets every rule is the greedy rule, which never reads q;
                    # it reads only the argmax, so the scores serve as they are (same lowest-id tie rule);
                    # the formula itself: the engine built these shapes, verify() would re-check them
                    valid = torch.arange(big_k, device=device)[None, :] < draft.lengths[:, None]  # [B, K]
                    verdict = greedy_verdict(law, draft.tokens, valid)
                else:
                    q = draft.probs if draft.probs is not None else \
                        F.one_hot(draft.tokens, spec.vocab_size).float()  # [B, K, V]
                    verdict = verify(law, q, draft.tokens, method=method,
                                     draft_lengths=draft.lengths, generator=spec.generator)
                n, nxt = verdict.accepted, verdict.next_token
                policy.observe(draft, n)
                # each row emits d_1..d_n, then the target's own token (cut after an EOS: exactspec.engine.steps)
                rows, n_l, lengths = active.tolist(), n.tolist(), draft.lengths.tolist()
                proposed = [d[:a] + [x] for d, a, x in zip(draft.tokens.tolist(), n_l, nxt.tolist())]
                tokens, flags, counts, done = emit(out, from_draft, n_gen, active, rows, proposed, n_l, eos_ids,
                                                   max_new)
                stats.record_step(*emitted_counts(counts, n_l, lengths), fed=big_k + 1, row_ids=rows)
                _sync(device)
                t_spec = time.perf_counter()
                stats.verify_time += t_spec - t2
                stats.target_time += t2 - t1
                t_spec -= t1
                step = StreamStep(rows=rows, tokens=tokens, from_draft=flags, finished=list(done), gamma=big_k,
                                  drafted=lengths)  # (the caller's copy: the loop reads `done` after the yield)
            stats.draft_time += t1 - t0
            t_out = time.perf_counter()
            yield step
            t3 = time.perf_counter()
            suspended += t3 - t_out  # time the consumer held the stream is not generation time
            kept = [i for i, d in enumerate(done) if not d]  # the rows still running, by position in the batch
            if kept:
                if big_k:  # (a plain step fed the pending token only, and keeps it)
                    target.keep(start, n + 1)  # pending + accepted drafts; the bonus is pending now
                if big_k == 0:  # each token of a plain streak is its own step for the drafter
                    tell_drafter(drafter, n, made, draft)
                else:
                    drafter.update(n, nxt, draft)
                pending = nxt
            if len(kept) < len(done):  # finished rows leave the batch
                rows_kept = torch.tensor(kept, dtype=torch.long, device=device)
                if kept:
                    target.select_rows(rows_kept)
                    drafter.select_rows(rows_kept)
                    pending = pending[rows_kept]
                active = active[rows_kept]
            t_tail = time.perf_counter() - t3
            stats.verify_time += t_tail
            if big_k and whole:
                stats.record_step_time(big_k, t_spec + t_tail)
            else:
                stats.plain_step_time += t_tail
        stats.early_stops = policy.early_stops
        new_len = int(n_gen.max()) if b else 0
        stats.new_tokens, stats.row_tokens = int(n_gen.sum()), n_gen.tolist()
        stats.total_time = time.perf_counter() - t_start - suspended
        if chain_for_tree:
            learn_from_chain(self, prior_key, stats, b)
        return GenerationOutput(torch.cat([ids, out[:, :new_len]], 1), stats, from_draft[:, :new_len])
