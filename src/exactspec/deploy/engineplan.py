"""A plan for the engine the user runs: its own rule's acceptance (:mod:`exactspec.deploy.enginerules`) priced per
gamma, the ready config it runs (vLLM's ``--speculative-config`` with ``draft_sample_method``, llama.cpp's server
flags, SGLang's flags), the memory the draft and its KV cache take, an ``exactspec audit`` verdict beside the
config, and the acceptance per prompt category.

The speedups are priced by exactspec's cost model (a profile, or the scalar c), not by the engine's own step
costs, which only the engine can tell; the plan says so.
"""
from __future__ import annotations

import math
import re

from exactspec.deploy.enginerules import ENGINES, EngineSettings, engine_replays
from exactspec.deploy.offline import OfflineAcceptance
from exactspec.deploy.plan import engine_configs, plan_replays

__all__ = ["engine_rules", "plan_engine", "engine_config", "vllm_schedule", "read_audit", "audit_entry",
           "with_audit", "draft_memory", "by_category", "add_details"]

CONFIG_KEYS = ("vllm", "sglang", "hf", "exactspec", "llamacpp")
RULE_TEXT = {
    "greedy": "greedy drafts (the draft's argmax, q one-hot): a drafted x is kept with probability p(x)",
    "probabilistic": "sampled drafts (q = softmax(draft logits / T)) verified by the p/q test: sum min(p, q)",
    "llamacpp": "greedy drafts kept while they match the target's own sample (kept with probability p(x)); at most "
                "n-max and the tokens left minus one; drafting stops below p-min (the draft's top-10 "
                "probability); drafts shorter than n-min dropped",
    "ngram": "prompt lookup (longest suffix match, earliest occurrence; q one-hot): kept with probability p(d)",
    "ngram-simple": "llama.cpp's ngram-simple lookup (a fixed n-gram searched backwards, an m-gram copied; q one-hot)",
}
PRICING = "exactspec's cost model (the profile or --cost), not the engine's own step costs"


def engine_rules(engine: str, drafter: str) -> list[str]:
    """The rules ``engine`` runs with a draft model or with prompt lookup (``drafter``), the default first."""
    if engine not in ENGINES or engine == "exactspec":
        raise ValueError(f"engine must be one of {ENGINES[1:]}, got {engine!r}")
    lookup = drafter == "prompt_lookup"
    return {"vllm": ["ngram"] if lookup else ["greedy", "probabilistic"],
            "sglang": ["ngram"] if lookup else ["greedy"],
            "llamacpp": ["ngram-simple"] if lookup else ["llamacpp"]}[engine]


def engine_config(engine: str, gamma: int, rule: str, *, target: str | None, draft: str | None,
                  settings: EngineSettings) -> dict:
    """``{engine: config}`` deploying ``gamma`` under ``rule``: vLLM's ``speculative_config``, llama.cpp's server
    flags, SGLang's launch flags."""
    if engine == "vllm":
        if rule == "ngram":
            return {"vllm": {"method": "ngram", "num_speculative_tokens": gamma, "prompt_lookup_max": settings.ngram,
                             "prompt_lookup_min": 1}}
        return {"vllm": {"method": "draft_model", "model": draft or "<draft model>", "num_speculative_tokens": gamma,
                         "draft_sample_method": rule}}
    if engine == "llamacpp":  # a plain -md without --spec-type is ignored by the server: the type is always given
        head = ["-m", target or "<target.gguf>", "--metrics"]
        if rule == "ngram-simple":
            return {"llamacpp": head + ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n",
                                        str(settings.ngram), "--spec-ngram-simple-size-m", str(gamma)]}
        return {"llamacpp": head + ["--spec-type", "draft-simple", "-md", draft or "<draft.gguf>",
                                    "--spec-draft-n-max", str(gamma), "--spec-draft-n-min", str(settings.n_min),
                                    "--spec-draft-p-min", f"{settings.p_min:g}"]}
    return {"sglang": engine_configs(gamma, drafter="prompt_lookup" if rule == "ngram" else "draft_model",
                                     target=target, draft=draft, ngram=settings.ngram)["sglang"]}


def vllm_schedule(by_batch: list[dict]) -> list[list[int]] | None:
    """vLLM's ``num_speculative_tokens_per_batch_size`` from the best gamma per planned batch size: inclusive
    ranges from 1, each planned size's gamma up to the next one, 0 where speculation does not pay; None when one
    gamma serves every batch size."""
    sized = [(e["batch_size"], e["recommended_gamma"] if e.get("speculation_helps") else 0)
             for e in by_batch if e.get("recommended_gamma") is not None]
    if len(sized) < 2 or not any(g for _, g in sized):
        return None
    out = []
    for i, (b, g) in enumerate(sized):
        last = sized[i + 1][0] - 1 if i + 1 < len(sized) else b
        if out and out[-1][2] == g:
            out[-1][1] = last  # one range where the best gamma does not change
        else:
            out.append([1 if i == 0 else b, last, g])
    return out if len(out) > 1 else None


def plan_engine(acc: OfflineAcceptance, engine: str, costs: list, settings: EngineSettings, *,
                draft_method: str | None = None, target: str | None = None, draft: str | None = None) -> dict:
    """The plan under ``engine``'s own rule: rows priced per gamma (``expected_tokens`` = the engine's tokens per
    step, 1 + accepted / drafts), the best gamma per batch size and that engine's config only. vLLM with a draft
    model plans both ``draft_sample_method`` values and takes ``draft_method``, else the one predicted best
    (greedy, vLLM's default, on a tie)."""
    rules = engine_rules(engine, acc.drafter)
    if draft_method is not None:
        if draft_method not in rules or engine != "vllm":
            raise ValueError(f"--draft-sample-method is vLLM's (greedy or probabilistic, with a draft model); "
                             f"{engine} with {acc.drafter} runs {rules}")
        rules = [draft_method]
    plans = {}
    for rule in rules:
        plans[rule] = plan_replays(acc, rule, costs, lambda g, r=rule: engine_config(
            engine, g, r, target=target, draft=draft, settings=settings),
            replays=engine_replays(acc, rule, settings), engine_tokens=True)

    def score(p):
        return p["predicted_speedup"] if p["predicted_speedup"] is not None else p["rows"][-1]["expected_tokens"]

    chosen = max(rules, key=lambda r: (score(plans[r]) > score(plans[rules[0]]) * (1 + 1e-9), r == rules[0]))
    out = plans[chosen]
    for k in CONFIG_KEYS:
        if k != engine:
            out.pop(k, None)
            for e in out["by_batch_size"]:
                e.pop(k, None)
    out |= {"engine": engine, "rule": chosen, "rule_description": RULE_TEXT[chosen], "pricing": PRICING}
    if len(plans) > 1:
        out["methods"] = {r: {k: p[k] for k in ("recommended_gamma", "predicted_speedup", "acceptance_rate",
                                                "mean_acceptance_length", "per_position_acceptance")}
                          for r, p in plans.items()}
    if engine == "vllm" and out.get("vllm"):
        sched = vllm_schedule(out["by_batch_size"])
        if sched:
            out["vllm"] = dict(out["vllm"], num_speculative_tokens=max(g for _, _, g in sched),
                               num_speculative_tokens_per_batch_size=sched)
    out["notes"] = _notes(engine, chosen, settings, acc)
    return out


def _notes(engine: str, rule: str, s: EngineSettings, acc: OfflineAcceptance) -> list[str]:
    notes = [f"{engine}'s rule replayed: {RULE_TEXT[rule]}; the first token comes from the prompt's pass; rows' "
             "expected_tokens are tokens per drafting step (the engine's counters' 1 + accepted / drafts)",
             f"predicted speedups are priced by {PRICING}"]
    if engine == "vllm":
        notes.append("vLLM runs the standard rejection rule here: its 'block' method needs the GPU model runner "
                     "(the CPU build ignores it) and 'synthetic' is not exact at all; neither is recommended")
        if s.temperature > 0:
            notes.append("vLLM's CPU build 0.32.0 was found not exact at T > 0 with speculation on this machine "
                         "(docs/audit.md): run `exactspec audit` on your build before deploying, and pass its JSON "
                         "with --audit")
    if engine == "sglang":
        notes.append("SGLang's rule is assumed, not run here: STANDALONE drafts with top-k 1 are the draft's argmax, "
                     "kept with probability p(x) by its target-only tree sampling at the default acceptance "
                     "thresholds (1.0; lower thresholds are not exact)")
        if rule == "ngram":
            notes.append("SGLang's NGRAM drafts a tree from its own n-gram cache: the chain lookup replayed here "
                         "(vLLM's) approximates it")
    if engine == "llamacpp":
        notes.append("llama.cpp applies top-k / top-p / min-p before temperature and its server's defaults are not "
                     "plain sampling (top-k 40, top-p 0.95, min-p 0.05): send the settings planned here")
        notes.append("llama.cpp loads GGUF files: convert a Hugging Face folder with `python -m "
                     "exactspec.pairs.gguf HF_DIR OUT.gguf`")
    notes.append("drafts are capped where the written text ends (an engine drafts past it until max_tokens): "
                 "equal when the texts reach --max-new-tokens")
    return notes


# ----------------------------------------------------------------------------------------------- audit
def read_audit(path: str) -> dict:
    """An ``exactspec audit --json`` report (``verdict``, ``engine``, ``settings``, ``p_value``); errors name --audit."""
    from exactspec.verification.checks import read_json_file

    data = read_json_file("--audit", path)
    if not isinstance(data, dict) or data.get("verdict") not in ("exact", "not exact", "inconclusive"):
        raise ValueError(f"--audit {path!r} is not an `exactspec audit --json` report (no verdict 'exact', "
                         "'not exact' or 'inconclusive')")
    return data | {"file": path}


def audit_entry(audit: dict, engine: str | None, temperature: float | None) -> tuple[dict, list[str]]:
    """What the plan shows beside its config: the audit's verdict, and notes when it says not exact, is of
    another engine, or did not test the planned temperature."""
    entry = {k: audit.get(k) for k in ("verdict", "engine", "settings", "p_value", "url", "served_model", "file")}
    verdict, settings = audit["verdict"], audit.get("settings") or []
    temps = [float(m) for s in settings for m in re.findall(r"\bT=([0-9.eE+-]+)", str(s))]
    notes = []
    if verdict == "not exact":
        entry["exact"] = False
        notes.append(f"NOT EXACT: `exactspec audit` found {audit.get('engine') or 'the engine'}'s speculative "
                     f"decoding changes the output's law at {', '.join(map(str, settings)) or 'its settings'} "
                     f"(p = {audit.get('p_value')}): with this config the server does not sample from the target; "
                     "do not deploy it until a fixed build passes the audit")
    elif verdict == "inconclusive":
        notes.append("the audit was inconclusive: it could neither confirm nor rule out a change of the law")
    else:
        entry["exact"] = True
    if engine and audit.get("engine") and audit["engine"] != engine:
        notes.append(f"the audit is of {audit['engine']}, the plan is for {engine}: its verdict does not apply")
    if temperature is not None and temps and not any(math.isclose(t, temperature, abs_tol=1e-9) for t in temps):
        notes.append(f"the audit tested T = {', '.join(f'{t:g}' for t in temps)}, not the planned T = "
                     f"{temperature:g}: exactness at one temperature says little of another")
    return entry, notes


def with_audit(out: dict, audit: dict | None, engine: str | None, temperature: float | None) -> dict:
    """``out`` with the audit's entry (``audit``) and its notes first; unchanged without an audit."""
    if audit is None:
        return out
    entry, notes = audit_entry(audit, engine, temperature)
    return out | {"audit": entry, "notes": notes + out.get("notes", [])}


# ---------------------------------------------------------------------------------------------- memory
def draft_memory(draft, context: int, slots: int, kv_bytes: int | None = None) -> dict:
    """The memory the draft takes: its weights, and its KV cache (2 * layers * kv_heads * head_dim * bytes per
    token, times ``context`` tokens per slot and ``slots``). ``draft``: a loaded model (its config and parameters)
    or a llama.cpp model (its GGUF file's size and metadata; f16 cache, llama.cpp's default)."""
    path = getattr(draft, "gguf_path", None) or (draft if isinstance(draft, str) and draft.endswith(".gguf") else None)
    if path:
        import os

        from gguf import GGUFReader

        fields = GGUFReader(path).fields
        arch_field = fields["general.architecture"]
        arch = bytes(arch_field.parts[arch_field.data[0]]).decode()

        def meta(key):
            f = fields.get(f"{arch}.{key}")
            return int(f.parts[f.data[0]][0]) if f is not None else None

        layers, kv_heads = meta("block_count"), meta("attention.head_count_kv") or meta("attention.head_count")
        head_dim = meta("attention.key_length") or (meta("embedding_length") // meta("attention.head_count"))
        weights, params, wbytes, kvb = os.path.getsize(path), None, None, kv_bytes or 2
    else:
        cfg = draft.config
        layers, heads = cfg.num_hidden_layers, cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        params = sum(p.numel() for p in draft.parameters())
        wbytes = next(draft.parameters()).element_size()
        weights, kvb = params * wbytes, kv_bytes or wbytes
    per_token = 2 * layers * kv_heads * head_dim * kvb
    kv = per_token * context * slots
    return {"weights_bytes": int(weights), "parameters": params, "bytes_per_parameter": wbytes,
            "kv_bytes_per_token": int(per_token), "kv_bytes_per_element": kvb, "context": context, "slots": slots,
            "kv_bytes": int(kv), "total_bytes": int(weights + kv)}


# ------------------------------------------------------------------------------------------ categories
def by_category(acc: OfflineAcceptance, categories: list, costs: list, *, engine: str = "exactspec",
                rule: str = "token", settings: EngineSettings | None = None) -> list[dict]:
    """Per prompt category (``categories``: one per prompt measured, None = uncategorised): its best gamma, the
    predicted speedup there and the acceptance, under the same rule and the first batch size's cost."""
    cats = [c for c, t in zip(categories, acc.texts) if len(t)]  # rows exist for non-empty texts only
    out = []
    for cat in dict.fromkeys(cats):
        rows = [r for r, c in zip(acc.rows, cats) if c == cat]
        sub = OfflineAcceptance(acc.greedy, acc.drafter, acc.max_gamma, rows,
                                [t for t, c in zip((t for t in acc.texts if len(t)), cats) if c == cat])
        replays = engine_replays(sub, rule, settings or EngineSettings()) if engine != "exactspec" else None
        p = plan_replays(sub, rule, costs[:1], lambda g: {}, replays=replays, engine_tokens=engine != "exactspec")
        g = p["recommended_gamma"] or acc.max_gamma
        row = p["rows"][g - 1]
        out.append({"category": cat, "prompts": len(rows), "tokens": sub.tokens, "recommended_gamma":
                    p["recommended_gamma"], "predicted_speedup": p["predicted_speedup"],
                    "speculation_helps": p["speculation_helps"], "expected_tokens": row["expected_tokens"],
                    "per_position_acceptance": row["per_position_acceptance"],
                    "acceptance_rate": row["acceptance_rate"], "mean_acceptance_length": row["mean_acceptance_length"],
                    "rows": [{k: r[k] for k in ("gamma", "expected_tokens", "predicted_speedup")} for r in p["rows"]]})
    return out


def add_details(out: dict, acc: OfflineAcceptance, costs: list, categories: list, *, engine: str,
                settings: EngineSettings, context: int, draft=None) -> None:
    """Into a plan: ``by_category`` where the prompts have categories, and ``draft_memory`` where there is a
    draft (its KV cache for ``context`` tokens in as many slots as the largest batch size planned; llama.cpp's
    cache is f16)."""
    if any(c is not None for c in categories):
        out["by_category"] = by_category(acc, categories[:len(acc.texts)], costs, engine=engine,
                                         rule=out.get("rule", "token"), settings=settings)
    if draft is not None:
        out["draft_memory"] = draft_memory(draft, context, max(b for b, _ in costs),
                                           kv_bytes=2 if engine == "llamacpp" else None)
