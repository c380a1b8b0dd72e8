"""One audit, end to end: talk to the engine, sample, compute the engine's law locally, test, report.

The law is computed by running ``--target`` locally in float64 (transformers), one forward pass per returned
sequence, which gives the target's logits at every sampled position at once; each request's settings turn them
into the engine's law (:mod:`exactspec.audit.laws`). The engine's own numerics (float32, bfloat16, ggml's
quantised kernels) differ slightly from float64: far below what the audit's sample sizes can see unless the
serving precision itself moves the law, which is what ``--control`` separates from speculation.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from exactspec.audit import stats
from exactspec.audit.acceptance import Tally, compare
from exactspec.audit.client import Sampled, Server, counters as _counters, plan_jobs, sample
from exactspec.audit.engines import DIALECTS, ENGINES, detect
from exactspec.audit.laws import Settings, biased_logits, pit

MISMATCH_MARGIN = 1.0  # logits: a first greedy token that differs by more than this is another model, not numerics
CHUNK = 64  # sequences per local forward pass, at most
LOGITS_BUDGET = 1 << 24  # float64 logits held at once (128 MiB): long samples over large vocabularies take fewer
# llama.cpp marks these end-of-generation when the vocabulary has them (llama-vocab.cpp, by text) beside the
# GGUF's eos/eot/eom ids; its ignore_eos bans them all.
EOG_TEXTS = ("<|endoftext|>", "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|return|>", "<|call|>",
             "<|eom_id|>", "</s>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<｜end▁of▁sentence｜>")


@dataclass
class AuditConfig:
    url: str
    target: str  # a Hugging Face folder, a .gguf file, or a shipped pair's name (its target)
    engine: str | None = None  # detected when None
    draft: str | None = None  # the draft the engine runs, for the acceptance comparison
    prompts: list[str] = field(default_factory=list)
    settings: list[Settings] = field(default_factory=lambda: [Settings(1.0)])
    samples: int = 600
    max_tokens: int = 8
    seed: int = 0
    request_seeds: bool = False
    alpha: float = stats.DEFAULT_ALPHA
    tolerance: float = stats.DEFAULT_TOLERANCE
    concurrency: int = 8
    control: str | None = None
    gamma: int | None = None
    draft_method: str = "greedy"
    draft_cost: float | None = None


class Models:
    """The target (and draft) in float64 with the tokenizer, loaded once."""

    def __init__(self, target: str, draft: str | None):
        import torch
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the audit's own progress lines say what is loading

        from exactspec.pairs.load import PAIRS, load_pair
        from exactspec.pairs.stdlib import load_pair as load_paths

        if target in PAIRS:
            t, d, tok = load_pair(target, dtype=torch.float64)
            if draft not in (None, target):
                raise ValueError(f"--draft: give the pair's own draft as --draft {target}, or a path with a path "
                                 "--target")
            self.target, self.draft, self.tokenizer = t, (d if draft == target else None), tok
        else:
            if draft in PAIRS:
                raise ValueError(f"--draft {draft}: a shipped pair's draft goes with its target (--target {draft}); "
                                 "with a path --target give the draft's path")
            self.target, self.draft, self.tokenizer = load_paths(target, draft, dtype=torch.float64)
        self.vocab = int(self.target.get_output_embeddings().weight.shape[0])
        self._prefix: dict = {}  # (model, prompt) -> the prompt's KV cache, all but its last token

    def logits(self, model, prompt: list[int], conts: list[list[int]]) -> np.ndarray:
        """``[len(conts), K, V]`` float64: the logits that predict each continuation's tokens after ``prompt``.

        The prompt's cache is computed once per model and prompt and shared by every continuation (right-padded:
        a causal model's earlier positions do not see the padding), so a sample costs its own K tokens only."""
        import copy
        import inspect

        import torch

        width = max(len(c) for c in conts)
        ids = torch.zeros((len(conts), width), dtype=torch.long)
        for i, c in enumerate(conts):
            ids[i, :len(c)] = torch.tensor(([prompt[-1]] + c)[:len(c)])
        with torch.no_grad():
            if len(prompt) < 2:
                return model(input_ids=ids).logits.double().numpy()[..., :self.vocab]
            key = (id(model), tuple(prompt))
            # transformers 5.x renamed past_key_values to cache (the old name warns, then goes)
            name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
            if key not in self._prefix:
                self._prefix = {k: v for k, v in self._prefix.items() if k[0] != id(model)}  # one prompt per model
                out = model(input_ids=torch.tensor([prompt[:-1]]), use_cache=True)
                self._prefix[key] = getattr(out, name)
            past = copy.deepcopy(self._prefix[key])
            past.batch_repeat_interleave(len(conts))
            out = model(input_ids=ids, use_cache=True, **{name: past}).logits
        return out.double().numpy()[..., :self.vocab]

    def eog_ids(self) -> list[int]:
        """The tokens llama.cpp's ignore_eos bans: the model's end ids and the vocabulary's end-marking texts."""
        ids = set()
        for src in (getattr(self.target, "generation_config", None), self.target.config):
            eos = getattr(src, "eos_token_id", None)
            ids.update([eos] if isinstance(eos, int) else (eos or []))
        vocab = self.tokenizer.get_vocab()
        ids.update(vocab[t] for t in EOG_TEXTS if t in vocab)
        return sorted(i for i in ids if 0 <= i < self.vocab)


def audit(cfg: AuditConfig, progress=None) -> dict:
    """Run one audit (module docstring); the report as a dict (the JSON ``exactspec audit --json`` prints)."""
    _check(cfg)
    say = progress.phase if progress is not None else (lambda text: None)
    server = Server(cfg.url, concurrency=cfg.concurrency)
    try:
        engine, served = _engine(server, cfg.engine)
        say(f"{engine} at {cfg.url} serves {served or 'a model'}; loading --target {cfg.target} locally")
        models = Models(cfg.target, cfg.draft)
        prompts = [models.tokenizer(p)["input_ids"] for p in cfg.prompts]
        dialect = DIALECTS[engine]
        banned = np.zeros(models.vocab, bool)
        if dialect.bans_eog_on_ignore_eos:
            banned[models.eog_ids()] = True
        _check_same_model(server, dialect, served, models, prompts, banned)
        before = _counters(server)
        jobs = plan_jobs(len(prompts), cfg.samples, len(cfg.settings), cfg.seed if cfg.request_seeds else None)
        if progress is not None:
            progress.start(len(jobs), f"sampling {len(jobs)} requests of {cfg.max_tokens} tokens")
        got = sample(server, dialect, served, prompts, cfg.settings, jobs, cfg.max_tokens, cfg.concurrency, progress)
        after = _counters(server)
    finally:
        server.close()
    if not got.jobs:
        raise KeyboardInterrupt if got.interrupted else ValueError("the server returned no samples")
    say(f"{len(got.jobs)} samples in {got.seconds:.1f} s; the law of each token (local float64 pass)")
    t0 = time.perf_counter()
    tally = Tally() if models.draft is not None else None
    law = _law_pass(cfg, dialect, models, prompts, banned, got, tally)
    report = _report(cfg, engine, served, got, law, prompts)
    for row in report["worst_tokens"] + report.get("greedy_mismatches", []):
        for key in ("token", "engine_token", "target_token"):
            if key in row:
                row[key.replace("token", "text")] = models.tokenizer.decode([row[key]])
    report["seconds"] = {"sampling": got.seconds, "law": time.perf_counter() - t0}
    report["_sampled"] = got
    report["control"] = None
    if cfg.control:
        report["control"] = _control(cfg, dialect, models, prompts, banned, law, report, progress)
    report["acceptance"] = _acceptance(cfg, engine, models, tally, before, after)
    report["notes"] = []
    if after is None:
        report["notes"].append(f"no speculative-decoding counters at {cfg.url}/metrics (vLLM shows them only with "
                               "speculation on; llama.cpp's server needs --metrics): the engine's own acceptance is "
                               "not shown")
    return report


def _check(cfg: AuditConfig) -> None:
    if cfg.engine is not None and cfg.engine not in ENGINES:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}, got {cfg.engine!r}")
    if not cfg.prompts:
        raise ValueError("--prompts: no prompts to audit with")
    temps = {s.temperature == 0 for s in cfg.settings}
    if len(temps) > 1:
        raise ValueError("--temperature: 0 (greedy) and T > 0 cannot be mixed in one audit (greedy is checked "
                         "token for token, T > 0 by a law test)")
    if cfg.draft_method not in ("greedy", "probabilistic"):
        raise ValueError(f"--draft-method must be greedy or probabilistic, got {cfg.draft_method!r}")


def _engine(server: Server, engine: str | None) -> tuple[str, str | None]:
    if engine is None:
        return detect(server.get_json)
    models = server.get_json("/v1/models")
    try:
        return engine, models["data"][0]["id"]
    except (KeyError, IndexError, TypeError):
        return engine, None


def _check_same_model(server, dialect, served, models, prompts, banned) -> None:
    """The first greedy token of every prompt is the target's own prefill (no draft is involved yet): one that
    differs by more than numerics means the server runs another model than --target."""
    greedy = Settings(0.0)
    for i, prompt in enumerate(prompts):
        body = dialect.request(served, prompt, 1, greedy, 0)
        ids = dialect.tokens(server.post_json(dialect.path, body))
        if not ids:
            from exactspec.audit.engines import NO_IDS

            raise ValueError(f"the server at {server.url} {NO_IDS[dialect.name]}")
        z = models.logits(models.target, prompt, [ids[:1]])[0, 0]
        if ids[0] >= models.vocab:
            raise ValueError(f"the server's model does not match --target: it returned token {ids[0]}, beyond "
                             f"--target's vocabulary of {models.vocab}")
        z = np.where(banned, -np.inf, z)
        mine = int(z.argmax())
        if ids[0] != mine and z[mine] - z[ids[0]] > MISMATCH_MARGIN:
            raise ValueError(f"the server's model does not match --target: on prompt {i + 1} its greedy first token "
                             f"is {ids[0]}, --target's is {mine} by a margin of {z[mine] - z[ids[0]]:.2f} logits")


def _seen(prefix: list[int], seq: list[int], n: int, vocab: int, window: int | None) -> np.ndarray:
    """``[n, V]`` bool: the tokens a repetition penalty counts before each of the n sampled positions."""
    out = np.zeros((n, vocab), bool)
    full = prefix + seq
    for k in range(n):
        upto = full[:len(prefix) + k]
        out[k, upto[-window:] if window else upto] = True
    return out


def _law_pass(cfg, dialect, models, prompts, banned, got: Sampled, tally, stream: int = 0) -> dict:
    """Every returned token's PIT value (or greedy check) under the engine's law, by local forward passes;
    ``stream`` 1 for the control, whose uniforms must be independent of the engine's."""
    rng = np.random.default_rng([cfg.seed, stream])
    greedy = cfg.settings[0].greedy
    vals, pxs, pos, prm, sets, toks = [], [], [], [], [], []
    expected = np.zeros((len(prompts), cfg.max_tokens, models.vocab), dtype=np.float32)  # counts: float32 is plenty
    mismatches = []
    order = sorted(range(len(got.jobs)), key=lambda i: (got.jobs[i].prompt, got.jobs[i].setting))
    chunk = max(1, min(CHUNK, LOGITS_BUDGET // (cfg.max_tokens * models.vocab)))
    for a in range(0, len(order), chunk):
        idx = order[a:a + chunk]
        for j in sorted({got.jobs[i].prompt for i in idx}):  # one local pass per prompt: its cache is shared
            group = [i for i in idx if got.jobs[i].prompt == j]
            conts = [got.tokens[i][:cfg.max_tokens] or [0] for i in group]
            z = models.logits(models.target, prompts[j], conts)  # [c, K', V]
            zq = models.logits(models.draft, prompts[j], conts) if tally is not None else None
            for r, i in enumerate(group):
                x = np.asarray(got.tokens[i][:cfg.max_tokens], dtype=np.int64)
                n = len(x)
                if n == 0:
                    continue
                if int(x.max()) >= models.vocab:
                    raise ValueError(f"the server returned token {int(x.max())}, beyond --target's vocabulary of "
                                     f"{models.vocab}: it does not serve --target")
                s = cfg.settings[got.jobs[i].setting]
                seen = _seen(prompts[j], got.tokens[i], n, models.vocab, dialect.penalty_window) \
                    if s.repetition_penalty != 1 else None
                p = dialect.law(z[r, :n], s, seen, banned)  # [n, V]
                if tally is not None:
                    tally.add(p, dialect.law(zq[r, :n], s, seen, banned), x)
                if greedy:  # the argmax after the engine's bans and penalty, as both engines take it
                    zr = biased_logits(z[r, :n], s, seen, banned)
                    best = zr.argmax(axis=1)
                    bad = np.flatnonzero(best != x)
                    if len(bad):
                        k = int(bad[0])
                        mismatches.append({"prompt": j + 1, "sample": got.jobs[i].sample + 1, "position": k + 1,
                                           "engine_token": int(x[k]), "target_token": int(best[k]),
                                           "margin": float(zr[k, best[k]] - zr[k, x[k]])})
                    continue
                v, px = pit(p, x, rng.random(n))
                vals.append(v), pxs.append(px), toks.append(x)
                pos.append(np.arange(n)), prm.append(np.full(n, j)), sets.append(np.full(n, got.jobs[i].setting))
                expected[j, :n] += p
    if greedy:
        tested = sum(min(len(t), cfg.max_tokens) for t in got.tokens)
        return {"greedy": True, "mismatches": mismatches, "tokens": tested}
    cat = (lambda xs, dt=float: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    return {"greedy": False, "values": cat(vals), "p_of_token": cat(pxs), "positions": cat(pos, int),
            "prompts": cat(prm, int), "settings": cat(sets, int), "tokens": cat(toks, int), "expected": expected}


def _report(cfg, engine, served, got: Sampled, law: dict, prompts) -> dict:
    out = {"engine": engine, "url": cfg.url, "served_model": served, "target": cfg.target,
           "settings": [s.label() for s in cfg.settings], "prompts": len(prompts), "max_tokens": cfg.max_tokens,
           "samples": len(got.jobs), "samples_asked": got.asked, "partial": got.interrupted,
           "alpha": cfg.alpha, "tolerance": cfg.tolerance}
    if law["greedy"]:
        mism = law["mismatches"]
        out.update({"verdict": stats.greedy_verdict(mism), "p_value": None, "tokens_tested": law["tokens"],
                    "greedy_equal": not mism, "greedy_mismatches": mism[:20], "greedy_mismatch_count": len(mism),
                    "worst_positions": [], "worst_tokens": []})
        return out
    tests = stats.family(law["values"], law["positions"], law["settings"], out["settings"])
    impossible = int((law["p_of_token"] <= 0).sum())
    out.update(stats.law_verdict(tests, cfg.alpha, cfg.tolerance, impossible))
    out["greedy_equal"] = None
    out["tests_run"] = [vars(t) for t in tests]
    out["worst_positions"] = sorted(({"position": int(t.name.split()[1]), "tokens": t.n, "ks": t.statistic,
                                      "p_value": t.p_value} for t in tests if t.name.startswith("position ")),
                                    key=lambda r: r["p_value"])
    observed = np.zeros_like(law["expected"])
    np.add.at(observed, (law["prompts"], law["positions"], law["tokens"]), 1.0)
    out["worst_tokens"] = _worst_tokens(observed, law["expected"])
    out["_values"] = law["values"]  # for the plot and the control's two-sample test; not in the JSON
    out["_positions"] = law["positions"]
    return out


def _worst_tokens(observed: np.ndarray, expected: np.ndarray, top: int = 10) -> list[dict]:
    """Per (prompt, position, token): observed count against the sum of the law's probabilities, ranked by Pearson
    residual (obs − exp) / sqrt(max(exp, 5))."""
    resid = (observed - expected) / np.sqrt(np.maximum(expected, 5.0))  # rare tokens' counts are noise
    flat = np.argsort(-np.abs(resid), axis=None)[:top]
    rows = []
    for f in flat:
        j, k, v = np.unravel_index(f, resid.shape)
        rows.append({"prompt": int(j) + 1, "position": int(k) + 1, "token": int(v),
                     "observed": int(observed[j, k, v]), "expected": float(expected[j, k, v]),
                     "residual": float(resid[j, k, v])})
    return rows


def _control(cfg, dialect, models, prompts, banned, law, report, progress) -> dict:
    """The same audit against --control (speculation off), and the two-sample test that says whether
    speculation changed the law."""
    say = progress.phase if progress is not None else (lambda text: None)
    say(f"control: sampling the same requests from {cfg.control}")
    server = Server(cfg.control, concurrency=cfg.concurrency)
    try:
        engine, served = _engine(server, cfg.engine or report["engine"])
        _check_same_model(server, DIALECTS[engine], served, models, prompts, banned)
        n = len(prompts) * cfg.samples  # the control's request seeds follow the engine's: independent samples
        jobs = plan_jobs(len(prompts), cfg.samples, len(cfg.settings), cfg.seed + n if cfg.request_seeds else None)
        if progress is not None:
            progress.start(len(jobs), f"control: sampling {len(jobs)} requests")
        got = sample(server, DIALECTS[engine], served, prompts, cfg.settings, jobs, cfg.max_tokens, cfg.concurrency,
                     progress)
    finally:
        server.close()
    claw = _law_pass(cfg, DIALECTS[engine], models, prompts, banned, got, None, stream=1)
    crep = _report(cfg, engine, served, got, claw, prompts)
    out = {"url": cfg.control, "verdict": crep["verdict"], "p_value": crep["p_value"], "samples": crep["samples"],
           "tokens_tested": crep["tokens_tested"], "greedy_equal": crep.get("greedy_equal")}
    if law["greedy"]:
        same = crep["greedy_equal"] == report["greedy_equal"]
        out.update({"two_sample_p": None, "law_verdict": report["verdict"]})
        report["verdict"] = report["verdict"] if not same or report["greedy_equal"] else "inconclusive"
        return out
    two = stats.two_sample(report["_values"], crep["_values"], cfg.alpha, cfg.tolerance)
    out.update({"two_sample_p": two["two_sample_p"], "two_sample_statistic": two["statistic"],
                "two_sample_detectable_ks_distance": two["detectable_ks_distance"], "law_verdict": report["verdict"]})
    verdict = two["verdict"]
    if verdict == "not exact" and report["verdict"] != "not exact":
        verdict = "inconclusive"  # the control departs from the law, not the speculative engine
    if report["impossible_tokens"] and not crep["impossible_tokens"]:
        verdict = "not exact"  # speculation sampled what the law, and the plain engine, never do
    report["verdict"] = verdict
    return out


def _acceptance(cfg, engine, models, tally, before, after) -> dict | None:
    from exactspec.deploy.enginemetrics import summarize

    counters = summarize(after.minus(before)) if (before is not None and after is not None) else None
    if counters is not None and not counters["num_drafts"]:
        counters = None
    if tally is None:
        return {"engine": counters} if counters else None
    # the configured draft length: both engines keep one per-position counter per draft position
    gamma = cfg.gamma or (len(counters["per_position_acceptance"]) if counters else 4)
    cost = cfg.draft_cost if cfg.draft_cost is not None else _param_ratio(models)
    return compare(tally, engine, cfg.draft_method, gamma, cost, counters)


def _param_ratio(models) -> float:
    """The draft's cost relative to the target's, estimated by their parameter counts."""
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    return n(models.draft) / n(models.target)
