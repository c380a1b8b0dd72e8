"""The target's sampling law exactly as ``target.generate()`` defines it, through transformers' own processors.

Two objects:

- :class:`SamplingConfig` (frozen, validated): the sampling settings, resolved from the target's
  ``generation_config`` the way ``generate`` resolves them (``model._prepare_generation_config``:
  explicit arguments > the model's ``generation_config`` > transformers' global defaults). So
  ``do_sample`` is False unless the config or the caller says otherwise, and sampling without a
  ``top_k`` in the config uses transformers' default ``top_k=50``, exactly as ``generate`` does.
- :class:`SamplingSpec` (one per run): the config plus the run's torch.Generator and the
  ``LogitsProcessorList`` that ``model._get_logits_processor`` builds from it (one list per prompt
  length, since a few processors count new tokens from the prompt's end). It turns target logits at
  every verified position into p, applying the processors with *that position's own prefix*: prompt +
  generated tokens + the drafted tokens before it, so p is what ``generate`` samples from there.

The prefix is each row's prompt *without its padding*: p is the law of ``generate`` on the prompt given
alone. Processors that read nothing but the scores (temperature, top-k/p, min-p, typical, epsilon/eta,
suppress_tokens) run once on all positions at once; only prefix-dependent ones (repetition penalty,
n-gram ban, bad words, minimum lengths, ...) run per group of positions with equal prefix length.
A processor exactspec cannot apply per position exactly is a ValueError naming its setting.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, fields

import torch
import torch.nn.functional as F
from transformers import GenerationConfig, GenerationMixin, PretrainedConfig
from transformers.generation import logits_process as lp

from exactspec.verification.checks import check_bool
from exactspec.verification.sampling import sample_from_probs

__all__ = ["SamplingConfig", "SamplingSpec", "Prefixes"]

# Processors that read only the scores, row by row: applied to every position in one call.
_STATIC = (lp.TemperatureLogitsWarper, lp.TopKLogitsWarper, lp.TopPLogitsWarper, lp.MinPLogitsWarper,
           lp.TypicalLogitsWarper, lp.EpsilonLogitsWarper, lp.EtaLogitsWarper, lp.TopHLogitsWarper,
           lp.SuppressTokensLogitsProcessor, lp.InfNanRemoveLogitsProcessor, lp.LogitNormalization)
# Stateless functions of (prefix, scores): applied per position with that position's prefix.
_PREFIX = (lp.RepetitionPenaltyLogitsProcessor, lp.NoRepeatNGramLogitsProcessor, lp.SequenceBiasLogitsProcessor,
           lp.MinLengthLogitsProcessor, lp.MinNewTokensLengthLogitsProcessor, lp.ForcedBOSTokenLogitsProcessor,
           lp.ForcedEOSTokenLogitsProcessor, lp.ExponentialDecayLengthPenalty,
           lp.SuppressTokensAtBeginLogitsProcessor)
# generation_config settings that make generate() do something other than sample/argmax one token at a
# time from processed scores, or add processors with hidden state: rejected, never silently ignored.
_UNSUPPORTED = {
    "num_beams": lambda v: v not in (None, 1),
    "num_return_sequences": lambda v: v not in (None, 1),
    "penalty_alpha": lambda v: v not in (None, 0, 0.0),
    "guidance_scale": lambda v: v not in (None, 1, 1.0),
    "watermarking_config": lambda v: v is not None,
    "constraints": lambda v: v is not None,
    "force_words_ids": lambda v: v is not None,
    "encoder_repetition_penalty": lambda v: v not in (None, 1, 1.0),
    "encoder_no_repeat_ngram_size": lambda v: v not in (None, 0),
    "token_healing": bool,
    "stop_strings": lambda v: v is not None,
}
# Other generation_config settings that add a supported processor; carried in SamplingConfig.extra.
_EXTRA = ("min_length", "sequence_bias", "forced_bos_token_id", "forced_eos_token_id",
          "exponential_decay_length_penalty", "remove_invalid_values", "renormalize_logits", "top_h")


def _number(name, v, lo, hi, *, lo_open=False, allow_none=False):
    if v is None and allow_none:
        return
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) \
        and (v > lo if lo_open else v >= lo) and v <= hi
    if not ok:
        rng = f"{'(' if lo_open else '['}{lo}, {hi}]"
        raise ValueError(f"{name} must be a number in {rng}{' or None' if allow_none else ''}, got {v!r}")


def _count(name, v, allow_none=False):
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{name} must be an integer >= 0{' or None' if allow_none else ''}, got {v!r}")


def _ids(name, v, nested=False):
    """Lists of token ids as (nested) tuples, so the frozen config stays immutable."""
    if v is None:
        return None
    try:
        out = tuple(tuple(int(t) for t in s) for s in v) if nested else tuple(int(t) for t in v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a list of {'lists of ' if nested else ''}token ids, got {v!r}") from None
    if any(t < 0 for t in (sum(out, ()) if nested else out)):
        raise ValueError(f"{name}: token ids must be >= 0, got {v!r}")
    return out


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings with transformers' global defaults; build with :meth:`from_model` to get the
    target's ``generation_config`` resolved as ``generate`` resolves it. ``temperature=0`` means greedy.

    ``extra`` holds the other processor-producing settings found in the config (``min_length``,
    ``sequence_bias``, ``forced_bos_token_id``, ...) as sorted ``(name, value)`` pairs.
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    min_p: float | None = None
    typical_p: float = 1.0
    epsilon_cutoff: float = 0.0
    eta_cutoff: float = 0.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    bad_words_ids: tuple | None = None
    suppress_tokens: tuple | None = None
    begin_suppress_tokens: tuple | None = None
    min_new_tokens: int | None = None
    eos_token_id: tuple = ()
    extra: tuple = field(default=(), repr=False)

    def __post_init__(self):
        object.__setattr__(self, "do_sample", check_bool("do_sample", self.do_sample))  # numpy bools too
        _number("temperature", self.temperature, 0.0, math.inf)
        _count("top_k", self.top_k)
        _number("top_p", self.top_p, 0.0, 1.0)
        _number("min_p", self.min_p, 0.0, 1.0, allow_none=True)
        _number("typical_p", self.typical_p, 0.0, 1.0, lo_open=True)
        _number("epsilon_cutoff", self.epsilon_cutoff, 0.0, 1.0)
        _number("eta_cutoff", self.eta_cutoff, 0.0, 1.0)
        _number("repetition_penalty", self.repetition_penalty, 0.0, math.inf, lo_open=True)
        _count("no_repeat_ngram_size", self.no_repeat_ngram_size)
        _count("min_new_tokens", self.min_new_tokens, allow_none=True)
        set_ = object.__setattr__  # normalise lists to tuples on the frozen instance
        set_(self, "bad_words_ids", _ids("bad_words_ids", self.bad_words_ids, nested=True))
        set_(self, "suppress_tokens", _ids("suppress_tokens", self.suppress_tokens))
        set_(self, "begin_suppress_tokens", _ids("begin_suppress_tokens", self.begin_suppress_tokens))
        set_(self, "eos_token_id", _ids("eos_token_id", self.eos_token_id) or ())
        if self.temperature == 0:  # exactspec's convention (transformers rejects it): temperature 0 is greedy
            set_(self, "do_sample", False)

    @property
    def greedy(self) -> bool:
        return not self.do_sample

    @classmethod
    def from_model(cls, model, generation_config: GenerationConfig | None = None, **overrides) -> "SamplingConfig":
        """Resolve ``model.generation_config`` (or `generation_config`) plus `overrides` exactly as
        ``model.generate(generation_config=..., **overrides)`` does. Overrides that are None are ignored;
        unknown names and settings exactspec cannot reproduce exactly raise ValueError."""
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if overrides.get("temperature") == 0:  # greedy by exactspec's convention; never reaches transformers
            overrides.pop("temperature")
            overrides["do_sample"] = False
        unknown = sorted(k for k in overrides if not hasattr(GenerationConfig(), k))
        if unknown:
            raise ValueError(f"unknown generation setting(s) {unknown}: not attributes of transformers' "
                             "GenerationConfig")
        gc, _ = model._prepare_generation_config(generation_config, **overrides)
        for name, bad in _UNSUPPORTED.items():
            value = getattr(gc, name, None)
            if bad(value):
                raise ValueError(f"generation setting {name}={value!r} is not supported: exactspec reproduces "
                                 "generate()'s one-sequence greedy or sampling law only")
        own = {f.name: getattr(gc, f.name) for f in fields(cls) if f.name not in ("extra", "eos_token_id")}
        own = {k: v for k, v in own.items() if v is not None or k in ("min_p", "min_new_tokens")}
        eos = gc.eos_token_id
        extra = tuple(sorted((k, getattr(gc, k)) for k in _EXTRA
                             if getattr(gc, k, None) not in (None, False, 0)))
        return cls(**own, eos_token_id=[eos] if isinstance(eos, int) else eos, extra=extra)

    def generation_config(self) -> GenerationConfig:
        """A fresh ``GenerationConfig`` holding exactly these settings (transformers defaults elsewhere)."""
        kw = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        kw["eos_token_id"] = list(self.eos_token_id) or None
        for k in ("bad_words_ids",):
            kw[k] = [list(s) for s in kw[k]] if kw[k] is not None else None
        for k in ("suppress_tokens", "begin_suppress_tokens"):
            kw[k] = list(kw[k]) if kw[k] is not None else None
        kw.update(copy.deepcopy(dict(self.extra)))
        defaults = GenerationConfig._get_default_generation_params()
        gc = GenerationConfig(**{**defaults, **kw})
        return gc

    def processors(self, model, prompt_len: int, max_new_tokens: int, device) -> lp.LogitsProcessorList:
        """The ``LogitsProcessorList`` ``model.generate`` builds for one unpadded prompt of `prompt_len`."""
        gc = self.generation_config()
        gc.max_new_tokens = max_new_tokens
        model._prepare_special_tokens(gc, device=device)
        gc = model._prepare_generated_length(gc, has_default_max_length=True, has_default_min_length=True,
                                             model_input_name="input_ids", input_ids_length=prompt_len,
                                             inputs_tensor=None)
        procs = model._get_logits_processor(gc, input_ids_seq_length=prompt_len, device=device)
        for p in procs:
            if not isinstance(p, _STATIC + _PREFIX):
                raise ValueError(f"logits processor {type(p).__name__} (from the generation config) cannot be "
                                 "applied per position exactly; remove that setting")
        return procs


@dataclass
class Prefixes:
    """What the engine knows of each active row's text (references, read only on demand):
    `ids [B0, P]` / `mask [B0, P]` the left-padded prompts, `out [B0, N]` the generated tokens,
    `n_gen [B0]` how many, `active [B]` the rows now in the batch."""

    ids: torch.Tensor
    mask: torch.Tensor
    out: torch.Tensor
    n_gen: torch.Tensor
    active: torch.Tensor

    def tokens(self, drafts: torch.Tensor):
        """`drafts [B, K]` -> (`seq [B, W]` left-aligned prompt + generated + drafts, `hist [B]` tokens
        before the drafts, `plen [B]` prompt lengths): position j's prefix is `seq[b, :hist[b] + j]`."""
        ids, mask = self.ids[self.active], self.mask[self.active].bool()
        out, n_gen = self.out[self.active], self.n_gen[self.active]
        b, p = ids.shape
        plen = mask.sum(1)
        hist = plen + n_gen
        w = int(hist.max()) + drafts.shape[1]
        c = torch.arange(w, device=ids.device)[None, :]  # [1, W]
        from_prompt = ids.gather(1, (c + p - plen[:, None]).clamp(0, p - 1))
        from_out = out.gather(1, (c - plen[:, None]).clamp(0, max(out.shape[1] - 1, 0))) if out.shape[1] else \
            torch.zeros_like(from_prompt)
        from_draft = drafts.gather(1, (c - hist[:, None]).clamp(0, max(drafts.shape[1] - 1, 0))) \
            if drafts.shape[1] else torch.zeros_like(from_prompt)
        seq = torch.where(c < plen[:, None], from_prompt, torch.where(c < hist[:, None], from_out, from_draft))
        return seq, hist, plen


class _DecoderOnly(GenerationMixin):
    """The little of a decoder-only model that transformers' processor set-up reads (specs built without one)."""

    config = PretrainedConfig()
    device = torch.device("cpu")


class SamplingSpec:
    """One run's sampling: `config`, the run's single torch.Generator, and the target's processors.

    `vocab_size` is the target's lm-head width: every distribution handed to verification is mapped to
    it (a wider draft head is truncated, a narrower one zero-padded), which keeps verification exact
    because any q is allowed as long as drafted tokens have q(x) > 0.
    """

    def __init__(self, config: SamplingConfig | None = None, generator: torch.Generator | None = None,
                 vocab_size: int | None = None, model=None, max_new_tokens: int = 2**30, *, greedy: bool = False,
                 temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, min_p: float | None = None):
        if config is None:  # the keyword form: a plain temperature / top-k / top-p / min-p transform
            config = SamplingConfig(do_sample=not greedy, temperature=temperature, top_k=top_k, top_p=top_p,
                                    min_p=min_p or None)
        model = model if model is not None else _DecoderOnly()
        self.config, self.generator, self.vocab_size = config, generator, vocab_size
        self.greedy = config.greedy
        self.temperature, self.top_k, self.top_p = config.temperature, config.top_k, config.top_p
        self._model, self._max_new, self._device = model, max_new_tokens, model.device
        self._lists: dict[int, lp.LogitsProcessorList] = {}
        probe = self._processors(1)  # validates every processor now, not mid-stream
        if vocab_size:  # some check their arguments on first use only (bad_words_ids against the vocabulary)
            for proc in probe:
                try:
                    proc(torch.zeros(1, 1, dtype=torch.long, device=self._device),
                         torch.zeros(1, vocab_size, device=self._device))
                except (ValueError, IndexError) as exc:
                    name = "bad_words_ids" if isinstance(proc, lp.NoBadWordsLogitsProcessor) else \
                        "sequence_bias" if isinstance(proc, lp.SequenceBiasLogitsProcessor) else type(proc).__name__
                    raise ValueError(f"{name}: {exc}") from exc
        self._static_only = all(isinstance(p, _STATIC) for p in probe)
        # Row-wise processors; the draft's q uses these only (q need only be the law drafts came from).
        self._static = [p for p in probe if isinstance(p, _STATIC)]
        self._identity = self.greedy and not probe

    @property
    def static_only(self) -> bool:
        """No active processor depends on the prefix: the target's law at a position is its logits' row
        transformed alone (what tree speculation needs)."""
        return self._static_only

    def _processors(self, prompt_len: int) -> lp.LogitsProcessorList:
        if prompt_len not in self._lists:
            self._lists[prompt_len] = self.config.processors(self._model, prompt_len, self._max_new, self._device)
        return self._lists[prompt_len]

    def _finish(self, scores: torch.Tensor) -> torch.Tensor:
        """Processed scores `[N, V]` -> fp32 probabilities (one-hot argmax when greedy)."""
        if self.greedy:
            return torch.zeros_like(scores).scatter_(-1, scores.argmax(-1, keepdim=True), 1.0)
        p = torch.softmax(scores, -1)
        if not bool(torch.isfinite(p[..., 0]).all()):  # NaN / +inf logits or an all -inf row
            raise ValueError("logits contain NaN or +inf, or every token was filtered out in a row")
        return p

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """`logits [..., V_model]` -> fp32 `[..., vocab_size]` after the row-wise processors (the draft's law)."""
        v = self.vocab_size
        if logits.shape[-1] > v:
            logits = logits[..., :v]
        lead = logits.shape[:-1]
        scores = logits.reshape(-1, logits.shape[-1]).float()
        empty = torch.zeros(scores.shape[0], 0, dtype=torch.long, device=scores.device)
        for proc in self._static:
            scores = proc(empty, scores)
        p = self._finish(scores).reshape(*lead, -1)
        return F.pad(p, (0, v - p.shape[-1])) if p.shape[-1] < v else p

    def sample(self, probs: torch.Tensor) -> torch.Tensor:
        """`probs [N, V]` -> `[N]` token ids (argmax when greedy, else inverse-CDF with the generator)."""
        if self.greedy:
            return probs.argmax(-1)
        return sample_from_probs(probs, self.generator)

    def target_law(self, logits: torch.Tensor, drafts: torch.Tensor, lengths: torch.Tensor,
                   prefixes: Prefixes) -> torch.Tensor:
        """What verification reads at the target's K + 1 positions.

        `logits [B, K+1, V]`, `drafts [B, K]`, `lengths [B]` (draft tokens per row). Returns p
        `[B, K+1, V]` fp32 when sampling; when greedy, scores whose argmax is ``generate``'s choice
        (the logits themselves when no processor is active). Position j is processed with the prefix
        prompt + generated + d_1..d_j of its row; positions past `lengths` get the row-wise processors only.
        """
        if self._identity:
            return logits
        if not self._processors(1):  # sampling with no processor: the softmax of fp32 logits (the same values
            return self._finish(logits.float())  # as the general path, without its per-call tensors)
        b, k1, v = logits.shape
        scores = logits.reshape(b * k1, v).float()  # generate() processes fp32 copies of the logits
        groups = [] if self._static_only else self._groups(drafts, lengths, prefixes)
        empty = torch.zeros(b * k1, 0, dtype=torch.long, device=scores.device)
        for i, proc in enumerate(self._processors(1)):
            if isinstance(proc, _STATIC):
                scores = proc(empty, scores)
                continue
            scores = scores.clone()
            for plen, flat, prefix in groups:  # one call per (prompt length, prefix length)
                scores[flat] = self._processors(plen)[i](prefix, scores[flat])
        if self.greedy:
            return scores.reshape(b, k1, v)
        return self._finish(scores).reshape(b, k1, v)

    @staticmethod
    def _groups(drafts, lengths, prefixes: Prefixes):
        """[(prompt_len, flat position indices [n], prefixes [n, L])] for the valid positions j <= lengths[b]."""
        seq, hist, plen = prefixes.tokens(drafts)
        b, k1 = drafts.shape[0], drafts.shape[1] + 1
        j = torch.arange(k1, device=seq.device)[None, :]
        valid = (j <= lengths[:, None]).reshape(-1)
        total = (hist[:, None] + j).reshape(-1)
        p_rep = plen[:, None].expand(b, k1).reshape(-1)
        key = p_rep * (seq.shape[1] + 1) + total
        flat_all = torch.arange(b * k1, device=seq.device)[valid]
        uniq, inv = torch.unique(key[valid], return_inverse=True)
        out = []
        for u in range(uniq.numel()):
            flat = flat_all[inv == u]
            length = int(total[flat[0]])
            out.append((int(p_rep[flat[0]]), flat, seq[flat // k1, :length]))
        return out
