"""The speculative-decoding counters of vLLM and llama.cpp's server, read from their Prometheus endpoint (or a
saved scrape).

vLLM (v1 engine) exports, per ``model_name`` and ``engine`` (one per data-parallel rank), and llama.cpp's server
(``--metrics``) the same schema under ``llamacpp:spec_decode_*`` (without labels):

- ``vllm:spec_decode_num_drafts_total``: drafts proposed (steps that drafted),
- ``vllm:spec_decode_num_draft_tokens_total``: draft tokens proposed,
- ``vllm:spec_decode_num_accepted_tokens_total``: draft tokens accepted,
- ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``: drafts whose position i (0-based)
  was accepted, which needs every earlier position accepted too.

So ``accepted_per_pos[i] / drafts`` is P(at least i + 1 accepted) and the ratio of consecutive ones is the
conditional acceptance of position i + 1: the per-position alpha that :mod:`exactspec.speed.speedup` takes. The
text is parsed with ``prometheus_client``'s parser; engines are summed; ``_created`` samples are ignored.
"""
from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field

__all__ = ["SpecCounters", "read_metrics", "parse_spec_counters", "summarize", "extrapolate"]

PREFIX = "vllm:spec_decode_"
PREFIXES = (PREFIX, "llamacpp:spec_decode_")
NAMES = {"drafts": "num_drafts_total", "draft_tokens": "num_draft_tokens_total",
         "accepted": "num_accepted_tokens_total", "per_pos": "num_accepted_tokens_per_pos_total"}


@dataclass
class SpecCounters:
    """The speculative-decoding counters of one model, summed over engines."""

    model_name: str | None
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: list[float] = field(default_factory=list)  # index i: position i (0-based)
    engine: str = "vllm"  # whose names they carry: "vllm" or "llamacpp"

    def minus(self, earlier: "SpecCounters") -> "SpecCounters":
        """The increments since `earlier`; a counter that went down means the engine restarted."""
        n = max(len(self.per_pos), len(earlier.per_pos))
        now = self.per_pos + [0.0] * (n - len(self.per_pos))
        before = earlier.per_pos + [0.0] * (n - len(earlier.per_pos))
        checks = [("num_drafts", self.drafts, earlier.drafts),
                  ("num_draft_tokens", self.draft_tokens, earlier.draft_tokens),
                  ("num_accepted_tokens", self.accepted, earlier.accepted)]
        checks += [(f'num_accepted_tokens_per_pos{{position="{i}"}}', v, o) for i, (v, o) in enumerate(zip(now, before))]
        for name, v, o in checks:
            if v < o:
                raise ValueError(f"counter {self.engine}:spec_decode_{name} went backwards ({o:g} -> {v:g}): the engine "
                                 "restarted; start watching again")
        return SpecCounters(self.model_name, self.drafts - earlier.drafts, self.draft_tokens - earlier.draft_tokens,
                            self.accepted - earlier.accepted, [v - o for v, o in zip(now, before)], self.engine)


def read_metrics(source: str, timeout: float = 5.0, option: str = "--vllm-metrics") -> str:
    """The Prometheus text at an http(s) URL or in a file (errors name `option`)."""
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=timeout) as resp:
                return resp.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ValueError(f"cannot scrape {option} {source!r}: {reason}") from None
    try:
        with open(source, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise ValueError(f"cannot read {option} {source!r}: {exc.strerror or exc}") from None


def parse_spec_counters(text: str, model_name: str | None = None) -> SpecCounters:
    """The counters of one model (``model_name``, or the only one present), summed over engines; vLLM's names or
    llama.cpp's."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {pre + v: k for pre in PREFIXES for k, v in NAMES.items()}
    found: dict[str, SpecCounters] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                key = wanted.get(s.name)
                if key is None:  # _created samples, other metrics
                    continue
                model = s.labels.get("model_name", "")
                c = found.setdefault(model, SpecCounters(model or None))
                c.engine = "llamacpp" if s.name.startswith("llamacpp:") else "vllm"
                if key == "per_pos":
                    i = _position(s.labels.get("position"))
                    c.per_pos += [0.0] * (i + 1 - len(c.per_pos))
                    c.per_pos[i] += s.value
                else:
                    setattr(c, key, getattr(c, key) + s.value)
    except ValueError as exc:
        raise ValueError(f"the metrics scrape is not Prometheus text: {exc}") from None
    if not found:
        raise ValueError("the scrape has no speculative-decoding metrics (vllm:spec_decode_* or "
                         "llamacpp:spec_decode_*): is speculative decoding enabled on this server?")
    if model_name is not None:
        if model_name not in found:
            raise ValueError(f"--model-name {model_name!r} not in the scrape (models: {sorted(found)})")
        return found[model_name]
    if len(found) > 1:
        raise ValueError(f"the scrape has several models {sorted(found)}; choose one with --model-name")
    return next(iter(found.values()))


def _position(v) -> int:
    try:
        i = int(v)
    except (TypeError, ValueError):
        raise ValueError(f"per-position counter with a bad position label {v!r}") from None
    if i < 0 or i > 4096:
        raise ValueError(f"per-position counter with a bad position label {v!r}")
    return i


def summarize(c: SpecCounters) -> dict:
    """Acceptance figures of a set of counters (totals, or the increments of one interval).

    ``accepted_per_position_per_draft[i]``: P(at least i + 1 accepted); ``per_position_acceptance[i]``: the
    conditional rate of position i + 1; ``acceptance_rate``: accepted / draft tokens; ``mean_acceptance_length``:
    1 + accepted per draft (vLLM's); ``gamma_in_use``: draft tokens per draft. Rates are None without drafts.
    """
    d = c.drafts
    reach = [a / d for a in c.per_pos] if d else []
    cond, prev = [], 1.0
    for r in reach:
        cond.append(r / prev if prev > 0 else 0.0)
        prev = r
    return {
        "engine": c.engine,
        "model_name": c.model_name,
        "num_drafts": d, "num_draft_tokens": c.draft_tokens, "num_accepted_tokens": c.accepted,
        "accepted_per_position_per_draft": reach,
        "per_position_acceptance": cond,
        "acceptance_rate": c.accepted / c.draft_tokens if c.draft_tokens else None,
        "mean_acceptance_length": 1.0 + c.accepted / d if d else None,
        "gamma_in_use": c.draft_tokens / d if d else None,
    }


def extrapolate(cond: list[float], gamma: int) -> tuple[list[float], str | None]:
    """Rates for positions 1..gamma from the observed conditional rates, and a note when extrapolated.

    Beyond the observed positions each rate is the *smallest* observed one, not the last: a position is
    reached only after easy stretches, so observed rates tend to rise with depth, and repeating the last
    one would promise what no deployment has shown.
    """
    if not cond:
        raise ValueError("no per-position counters (vllm:spec_decode_num_accepted_tokens_per_pos) to plan from")
    if gamma <= len(cond):
        return list(cond[:gamma]), None
    floor = min(cond)
    note = (f"positions {len(cond) + 1}..{gamma} were never drafted; their acceptance is extrapolated "
            f"conservatively as the smallest observed rate ({floor:.3f})")
    return list(cond) + [floor] * (gamma - len(cond)), note
