"""SpeculativeGenerator: exact, batched speculative decoding for Hugging Face causal LMs.

One step, for the B rows still generating:

1. the drafter proposes up to k_b tokens per row (k_b = min(gamma, tokens left - 1), so a step can never
   overshoot ``max_new_tokens``), with the distributions q they were drawn from;
2. the target runs ONE forward over [pending token, d_1 .. d_K] (K + 1 positions, ragged rows masked);
3. :func:`exactspec.rules.verify` applies the exact rule ("token", "block" or "greedy") and returns the
   accepted count n_b and the corrected/bonus token per row;
4. both KV caches are rolled back to what each row accepted (see :mod:`exactspec.cache`): crop to the
   longest accepted run in the batch, mask the other rows' rejected slots as holes, keep explicit
   per-row positions. Nothing is recomputed. Finished rows leave the batch.

The target never sees its own last emitted token until the next step (it is "pending"): so the prefill
is the prompt minus its last token and every target call is a verification producing >= 1 token.
"""
from __future__ import annotations

import copy
import time
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from exactspec.cache import SlotCache
from exactspec.drafters import DraftModelDrafter, PromptLookupDrafter, SamplingSpec
from exactspec.stats import GenerationStats
from exactspec.rules import verify
from exactspec.trees import parse_tree, run_tree

__all__ = ["SpeculativeGenerator", "GenerationOutput", "StreamStep", "GenerationStream"]

METHODS = ("token", "block", "greedy")
# Cost models measured once per (target, draft, batch size) for gamma="auto"; weak refs so models can be freed.
_COST_MODELS: dict[tuple[int, int, int], tuple] = {}
AUTO_CALIBRATE_AFTER = 4  # target calls of a run before gamma="auto" prices the loop from its own timings


@dataclass
class GenerationOutput:
    """`sequences [B, P + new]` (prompt + new tokens, finished rows padded with pad_token_id),
    `stats` (:class:`GenerationStats`), `from_draft [B, new]` bool: the token was an accepted draft token."""

    sequences: torch.Tensor
    stats: GenerationStats
    from_draft: torch.Tensor


@dataclass
class StreamStep:
    """Tokens emitted by one speculative step. Lists are parallel, one entry per row that emitted:
    `rows` (index in the input batch), `tokens`, `from_draft` (per token: accepted draft token?),
    `finished` (the row is done after this step), `drafted` (draft tokens the row proposed this step: when
    all of them were accepted the last token is the target's bonus token, otherwise a corrected one)."""

    rows: list[int]
    tokens: list[list[int]]
    from_draft: list[list[bool]]
    finished: list[bool]
    gamma: int
    drafted: list[int]


class GenerationStream:
    """Iterable of :class:`StreamStep`; after it is exhausted, `.output` holds the GenerationOutput."""

    def __init__(self, steps):
        self._steps = steps
        self.output: GenerationOutput | None = None

    def __iter__(self):
        return self

    def __next__(self) -> StreamStep:
        # An iterator rather than a generator wrapper: abandoning one loop (zip, break) must not close the
        # underlying run, so a later loop can resume it.
        try:
            return next(self._steps)
        except StopIteration as stop:
            if stop.value is not None:
                self.output = stop.value
            raise


def _check_causal_lm(model, name: str) -> None:
    from transformers import PreTrainedModel

    ok = (isinstance(model, PreTrainedModel) and hasattr(model, "generate")
          and not getattr(model.config, "is_encoder_decoder", False)
          and model.get_output_embeddings() is not None)
    if not ok:
        raise TypeError(f"{name} must be a transformers causal LM (e.g. from AutoModelForCausalLM), "
                        f"got {type(model).__name__}")


def _max_positions(model) -> int | None:
    cfg = model.config.get_text_config()
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        v = getattr(cfg, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":  # honest timings need the queued kernels finished
        torch.cuda.synchronize(device)


def _as_id_list(x) -> list[int]:
    if x is None:
        return []
    if isinstance(x, torch.Tensor):
        return [int(v) for v in x.flatten().tolist()]
    if isinstance(x, int):
        return [x]
    return [int(v) for v in x]


class SpeculativeGenerator:
    """Exact speculative decoding with a draft model or a model-free drafter.

    Args:
        target: a transformers causal LM (Llama, Qwen2, GPT-2, ... any full-attention KV-cache model).
        draft: a smaller causal LM sharing the target's tokenizer (lm-head widths may differ by padding),
            on the target's device; its dtype may differ (e.g. a bf16 draft for an fp32 target): its
            distributions are taken in fp32, and exactness never depends on how good q is.
        drafter: instead of `draft`: ``"prompt_lookup"`` or a drafter object (e.g.
            ``PromptLookupDrafter(max_ngram=3, max_draft=10)``).
        cost_model: a :class:`exactspec.CostModel` for ``gamma="auto"``; measured once per pair (and
            cached) when omitted.
        max_gamma: largest gamma ``gamma="auto"`` may choose. ``gamma="auto"`` starts each run from the
            per-position acceptance its earlier runs measured (the first run from a neutral guess).
        calibrate: with ``gamma="auto"``, after ``AUTO_CALIBRATE_AFTER`` target calls re-price the cost
            model from the run's own timings (:meth:`CostModel.calibrate`: draft steps as they cost inside
            the loop, plus the loop's per-step overhead). ``False`` uses `cost_model` exactly as given.
        tokenizer, draft_tokenizer: optional; when both are given their vocabularies must agree
            (see :meth:`check_tokenizers`).
    """

    def __init__(self, target, draft=None, *, drafter=None, cost_model=None, max_gamma: int = 12,
                 calibrate: bool = True, tokenizer=None, draft_tokenizer=None):
        _check_causal_lm(target, "target")
        if tokenizer is not None and draft_tokenizer is not None:
            self.check_tokenizers(tokenizer, draft_tokenizer)
        if draft is not None and drafter is not None:
            raise ValueError("pass either draft (a model) or drafter, not both")
        if isinstance(drafter, str):
            if drafter != "prompt_lookup":
                raise ValueError(f"drafter must be 'prompt_lookup' or a drafter object, got {drafter!r}")
            drafter = PromptLookupDrafter()
        if draft is not None:
            _check_causal_lm(draft, "draft")
            if draft.device != target.device:
                raise ValueError(f"draft is on {draft.device} but target is on {target.device}")
            drafter = DraftModelDrafter(draft)
        for name, model in (("target", target), ("draft", draft)):
            if model is not None and model.training:  # dropout would make outputs random and inexact
                raise ValueError(f"{name} is in training mode (dropout active); call {name}.eval() first")
        if drafter is None:
            raise ValueError("a draft model or a drafter is required (draft=... or drafter='prompt_lookup')")
        if isinstance(max_gamma, bool) or not isinstance(max_gamma, int) or max_gamma < 1:
            raise ValueError(f"max_gamma must be an integer >= 1, got {max_gamma!r}")
        self.target, self.draft, self.drafter = target, draft, drafter
        self.cost_model, self.max_gamma, self.calibrate = cost_model, max_gamma, bool(calibrate)
        # Per-position acceptance carried from one run to the next (per sampling setting and rule), so
        # gamma="auto" starts a run from what earlier runs of this generator measured, not a blind guess.
        self._alpha_priors: dict[tuple, list[float]] = {}

    @staticmethod
    def check_tokenizers(tokenizer, draft_tokenizer) -> None:
        """Raise ValueError unless both tokenizers map every token string to the same id."""
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

    def stream(self, input_ids, attention_mask=None, *, max_new_tokens: int, do_sample: bool = True,
               temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, gamma=4,
               method: str = "token", eos_token_id=None, pad_token_id=None, seed=None,
               tree=None) -> GenerationStream:
        """Generate step by step. Returns an iterable of :class:`StreamStep` whose ``.output`` is set at the end.

        Args:
            input_ids: `[B, P]` int64, left-padded (HF convention for decoder-only models).
            attention_mask: `[B, P]`, 1 for real tokens (default: all ones).
            max_new_tokens: exact number of new tokens per row unless EOS comes first.
            do_sample / temperature / top_k / top_p: the target's sampling transform (also applied to the
                draft). ``do_sample=False``, ``temperature=0`` or ``method="greedy"`` mean greedy decoding,
                which reproduces ``target.generate(do_sample=False)`` token for token.
            gamma: draft tokens per step (int >= 1) or ``"auto"``.
            method: verification rule: "token" (Leviathan et al.), "block" (Sun et al. 2024) or "greedy".
                In greedy mode "token"/"block" act on one-hot distributions, where they reduce to greedy.
            eos_token_id: int or list; None uses ``target.generation_config.eos_token_id``; [] disables.
            pad_token_id: filler after EOS; None uses the generation config's pad (else EOS, else 0).
            seed: seeds the run's single torch.Generator (draft sampling and verification).
            tree: tree speculation instead of a chain (replaces `gamma`; needs a draft model): a tuple of
                branching factors per depth (``(3, 2, 1, 1)``), an int node budget (a dynamic tree) or
                ``"auto"``; see :mod:`exactspec.trees`. Verification is the exact multi-round rule.
        """
        cfg = self._check_args(input_ids, attention_mask, max_new_tokens, do_sample, temperature, top_k,
                               top_p, gamma, method, eos_token_id, pad_token_id, seed)
        cfg["tree"] = parse_tree(tree, has_draft=self.draft is not None, method=method)
        return GenerationStream(self._run(**cfg))

    # ------------------------------------------------------------------------------ validation
    def _check_args(self, input_ids, attention_mask, max_new_tokens, do_sample, temperature, top_k, top_p,
                    gamma, method, eos_token_id, pad_token_id, seed) -> dict:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[1] < 1 \
                or input_ids.dtype not in (torch.int64, torch.int32):
            raise ValueError("input_ids must be an integer tensor of shape [batch, prompt_len >= 1]")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}")
        n_embed = self.target.get_input_embeddings().num_embeddings
        real = input_ids[attention_mask.bool()]
        if real.numel() and (int(real.min()) < 0 or int(real.max()) >= n_embed):
            raise ValueError(f"input_ids: token ids must lie in [0, {n_embed}) (the target's vocabulary), "
                             f"got ids in [{int(real.min())}, {int(real.max())}]")
        if not bool((attention_mask[:, -1] != 0).all()):
            raise ValueError("attention_mask: prompts must be left-padded (last column real for every row)")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if not (gamma == "auto" or (isinstance(gamma, int) and not isinstance(gamma, bool) and gamma >= 1)):
            raise ValueError(f"gamma must be an integer >= 1 or 'auto', got {gamma!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an integer or None, got {seed!r}")
        prompt_len = int(attention_mask.sum(1).max())
        models = [("target", self.target)] + ([("draft", self.draft)] if self.draft is not None else [])
        for name, model in models:
            limit = _max_positions(model)
            if limit is not None and prompt_len + max_new_tokens > limit:
                raise ValueError(
                    f"input_ids: prompt of {prompt_len} tokens + max_new_tokens={max_new_tokens} exceeds "
                    f"the {name}'s context of {limit} positions")
        gc = self.target.generation_config
        eos = _as_id_list(gc.eos_token_id if eos_token_id is None else eos_token_id)
        if pad_token_id is None:
            pad_token_id = gc.pad_token_id if gc.pad_token_id is not None else (eos[0] if eos else 0)
        greedy = (not do_sample) or temperature == 0 or method == "greedy"
        device = self.target.device
        gen = torch.Generator(device=device)
        gen.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, (1,))))
        spec = SamplingSpec(greedy=greedy, temperature=float(temperature), top_k=top_k, top_p=top_p,
                            generator=gen, vocab_size=self.target.get_output_embeddings().weight.shape[0])
        spec.probs(torch.zeros(1, 2, device=device))  # validates top_k / top_p now, not mid-stream
        return dict(ids=input_ids.long().to(device), mask=attention_mask.long().to(device),
                    max_new=max_new_tokens, spec=spec, gamma=gamma, method=method,
                    eos=torch.tensor(eos, dtype=torch.long, device=device), pad=int(pad_token_id))

    # ---------------------------------------------------------------------------------- gamma
    def _cost_model(self, batch_size: int):
        """The given cost model, else one measured at this batch size (once per pair and batch size)."""
        from exactspec.costmodel import CostModel

        if self.cost_model is not None:
            return self.cost_model
        draft = self.draft if self.draft is not None else self.target
        key = (id(self.target), id(draft), batch_size)
        hit = _COST_MODELS.get(key)
        if hit is not None and hit[0]() is self.target and hit[1]() is draft:
            return hit[2]
        cm = CostModel.measure(self.target, draft, batch_size=batch_size)
        if self.draft is None:  # model-free drafter: drafting costs (almost) nothing next to the target
            cm = cm.without_draft()
        _COST_MODELS[key] = (weakref.ref(self.target), weakref.ref(draft), cm)
        return cm

    def _next_gamma(self, gamma, stats: GenerationStats, batch_size: int = 1, prior_key: tuple = ()) -> int:
        if gamma != "auto":
            return gamma
        from exactspec.speedup import optimal_gamma

        cost = self._cost_model(batch_size)
        if self.calibrate and stats.target_calls >= AUTO_CALIBRATE_AFTER:
            # Price the loop as it runs (draft steps with caches the target just evicted, the per-step
            # overhead), not bare forward passes: see CostModel.calibrate.
            cost = cost.calibrate(stats)
        prior = self._alpha_priors.get(prior_key)
        best, _ = optimal_gamma(stats.smoothed_alphas(self.max_gamma, prior=prior), cost, self.max_gamma)
        return int(best)

    # ------------------------------------------------------------------------------------ loop
    @torch.no_grad()  # not inference_mode: callers may edit the returned tensors in place
    def _run(self, ids, mask, max_new, spec: SamplingSpec, gamma, method, eos, pad, tree=None):
        device, (b, p) = ids.device, ids.shape
        stats = GenerationStats()
        prior_key = (spec.greedy, spec.temperature, spec.top_k, spec.top_p, method)
        if tree is not None:  # tree speculation: exactspec.trees runs the steps (TreeStepper.step / commit)
            return (yield from run_tree(self, ids, mask, max_new, spec, tree, eos, pad, prior_key))
        out = torch.full((b, max_new), pad, dtype=torch.long, device=device)  # [B, max_new]
        from_draft = torch.zeros(b, max_new, dtype=torch.bool, device=device)
        n_gen = torch.zeros(b, dtype=torch.long, device=device)
        t_start, suspended = time.perf_counter(), 0.0
        active = torch.arange(b, device=device) if max_new > 0 else torch.zeros(0, dtype=torch.long)
        # A per-run copy: drafters keep per-run state, and two streams of one generator may interleave.
        drafter = copy.copy(self.drafter)
        if max_new > 0:
            target = SlotCache(self.target)
            if p > 1:  # the last prompt token stays pending: the first verification feeds it
                target.forward(ids[:, :-1], mask[:, :-1].bool(), logits_to_keep=1)
            drafter.start(ids, mask)
            pending = ids[:, -1]  # [B]
            _sync(device)
            stats.prefill_time = time.perf_counter() - t_start
        limit = getattr(drafter, "max_draft", None)
        while active.numel():
            g = self._next_gamma(gamma, stats, b, prior_key)
            stats.gamma_history.append(g)
            k = (max_new - n_gen[active] - 1).clamp(min=0, max=g if limit is None else min(g, limit))
            t0 = time.perf_counter()
            calls0 = getattr(drafter, "forward_calls", 0)
            first0 = getattr(drafter, "first_call_time", 0.0)
            draft = drafter.propose(k, spec)
            calls = getattr(drafter, "forward_calls", 0) - calls0
            stats.draft_calls += calls
            if calls:
                stats.draft_steps += 1
                stats.draft_first_time += getattr(drafter, "first_call_time", 0.0) - first0
            _sync(device)
            t1 = time.perf_counter()
            big_k = draft.tokens.shape[1]
            pos = torch.arange(big_k + 1, device=device)[None, :]  # [1, K+1]
            inp = torch.cat([pending[:, None], draft.tokens], 1)  # [B, K+1]
            logits = target.forward(inp, pos <= draft.lengths[:, None])  # [B, K+1, V]
            _sync(device)
            t2 = time.perf_counter()
            if spec.greedy:  # on one-hot targets every rule is the greedy rule, which never reads q;
                # it reads only the argmax, so the logits serve as they are (same lowest-id tie rule)
                verdict = verify(logits, None, draft.tokens, method="greedy", draft_lengths=draft.lengths)
            else:
                q = draft.probs if draft.probs is not None else \
                    F.one_hot(draft.tokens, spec.vocab_size).float()  # [B, K, V]
                verdict = verify(spec.probs(logits), q, draft.tokens, method=method,
                                 draft_lengths=draft.lengths, generator=spec.generator)
            n, nxt = verdict.accepted, verdict.next_token
            emitted = torch.cat([draft.tokens, torch.zeros_like(pending)[:, None]], 1)
            emitted.scatter_(1, n[:, None], nxt[:, None])  # [B, K+1]: d_1..d_n, then the bonus token
            count = n + 1
            hit_eos = torch.isin(emitted, eos) & (pos < count[:, None])
            ended = hit_eos.any(1)
            count = torch.where(ended, hit_eos.long().argmax(1) + 1, count)  # cut after the first EOS
            # Statistics count what was emitted: an EOS among the accepted drafts ends the row there, and
            # the drafts after it were neither emitted nor, for the statistics, proposed.
            cut = ended & (count <= n)
            stats.record_step(torch.where(cut, count, draft.lengths), torch.where(cut, count, n), fed=big_k + 1)
            write = pos < count[:, None]  # [B, K+1]
            rows = active[:, None].expand_as(write)[write]
            cols = (n_gen[active][:, None] + pos).expand_as(write)[write]
            out[rows, cols] = emitted[write]
            from_draft[rows, cols] = (pos < n[:, None]).expand_as(write)[write]
            n_gen[active] += count
            done = ended | (n_gen[active] >= max_new)
            _sync(device)
            stats.verify_time += time.perf_counter() - t2
            stats.draft_time += t1 - t0
            stats.target_time += t2 - t1
            t_out = time.perf_counter()
            yield StreamStep(
                rows=active.tolist(),
                tokens=[r[:c] for r, c in zip(emitted.tolist(), count.tolist())],
                from_draft=[[i < nb for i in range(c)] for nb, c in zip(n.tolist(), count.tolist())],
                finished=done.tolist(), gamma=g, drafted=draft.lengths.tolist())
            t3 = time.perf_counter()
            suspended += t3 - t_out  # time the consumer held the stream is not generation time
            keep = ~done
            if keep.any():
                target.rollback(pos <= n[:, None])  # pending + accepted drafts; the bonus is pending now
                drafter.update(n, nxt, draft)
                pending = nxt
                if not bool(keep.all()):
                    rows_kept = keep.nonzero().squeeze(1)
                    target.select_rows(rows_kept)
                    drafter.select_rows(rows_kept)
                    pending = pending[rows_kept]
            active = active[keep]
            stats.verify_time += time.perf_counter() - t3
        if gamma == "auto" and sum(stats.position_drafted):  # a run that drafted nothing teaches nothing
            self._alpha_priors[prior_key] = stats.smoothed_alphas(self.max_gamma,
                                                                  prior=self._alpha_priors.get(prior_key))
        new_len = int(n_gen.max()) if b else 0
        stats.new_tokens = int(n_gen.sum())
        stats.total_time = time.perf_counter() - t_start - suspended
        return GenerationOutput(torch.cat([ids, out[:, :new_len]], 1), stats, from_draft[:, :new_len])
