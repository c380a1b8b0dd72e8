"""The engines' rules replayed on the target's texts (exactspec.deploy.enginerules) give what each engine's own loop
does: exactly, in expectation over the target's law, by enumeration on small prefix-dependent distributions (vLLM's
greedy and probabilistic drafts, llama.cpp's sample-and-match with its caps, n-min and p-min); exactly on every
text for llama.cpp's server run step by step with a tiny draft model; and llama.cpp's ngram-simple lookup step by
step on given texts."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from _spec_models import noisy_copy, tiny_lm
from exactspec.deploy.enginerules import (EngineSettings, RowTerms, _ngram_simple_terms, draft_terms,
                                          engine_acceptance, ngram_simple, stop_lengths)
from exactspec.deploy.offline import OfflineAcceptance, _Row, measure_acceptance
from test_offline_acceptance_matches_generate import PROMPTS, tokenizer

V, N = 3, 5  # vocabulary, tokens written per text


def tables(seed: int):
    """A target law p and a draft law q that depend on the whole prefix (a fresh random one per prefix)."""
    g = np.random.default_rng(seed)
    made = {}

    def law(which, prefix):
        key = (which, tuple(prefix))
        if key not in made:
            w = g.random(V) ** 3 + 1e-3
            made[key] = w / w.sum()
        return made[key]
    return (lambda pre: law("p", pre)), (lambda pre: law("q", pre))


def conf(q: np.ndarray) -> float:
    return float(q.max())  # V <= 10: llama.cpp's top-10 renormalisation keeps the whole law


# ------------------------------------------------------------------------------- the engines, enumerated
def engine_loop(p, q, rule: str, gamma: int, s: EngineSettings):
    """Expected (reaching, accepted) per draft position and steps per drafted length of the engine's own loop
    writing N tokens: every draft and coin enumerated with its probability."""
    reach, acc, lengths = np.zeros(gamma), np.zeros(gamma), np.zeros(gamma + 1)

    def drafts(prefix, cap):
        """[(draft tokens, their probability, q laws)] as the engine drafts them."""
        if rule == "probabilistic":
            out = []
            for d in itertools.product(range(V), repeat=cap):
                pr = np.prod([q(prefix + d[:j])[d[j]] for j in range(cap)])
                out.append((d, pr))
            return out
        d = []
        while len(d) < cap:  # the draft's own greedy chain
            law = q(prefix + tuple(d))
            if rule == "llamacpp" and conf(law) < s.p_min:
                break
            d.append(int(law.argmax()))
        if rule == "llamacpp" and len(d) < s.n_min:
            d = []
        return [(tuple(d), 1.0)]

    def walk(prefix, weight):
        n = len(prefix)
        if n >= N:
            return
        if n == 0:  # the first token comes from the prompt's pass
            lengths[0] += weight
            for x in range(V):
                walk((x,), weight * p(())[x])
            return
        for d, pr in drafts(prefix, min(gamma, N - n - 1)):
            w0 = weight * pr
            lengths[len(d)] += w0
            alive = w0  # probability that positions 1..i were accepted
            for i, tok in enumerate(d):
                here = prefix + d[:i]
                pl, ql = p(here), q(here)
                keep = min(1.0, pl[tok] / ql[tok]) if rule == "probabilistic" else pl[tok]
                reach[i] += alive
                acc[i] += alive * keep
                resid = np.maximum(pl - ql, 0) if rule == "probabilistic" else np.where(np.arange(V) == tok, 0, pl)
                for x in range(V):
                    if resid[x] > 0:
                        walk(here + (x,), alive * (1 - keep) * resid[x] / resid.sum())
                alive *= keep
            for x in range(V):  # all accepted: the bonus token
                walk(prefix + d + (x,), alive * p(prefix + d)[x])
    walk((), 1.0)
    return reach, acc, lengths


def branch_table(q, text, drafts, match, depth):
    """The confidences of the draft's own chain after each mismatch (what branch_confidence runs on a model)."""
    out = np.full((len(text), depth), np.nan)
    for t in range(len(text)):
        if match[t]:
            continue
        pre = tuple(text[:t]) + (int(drafts[t]),)
        for j in range(depth):
            law = q(pre)
            out[t, j] = conf(law)
            pre += (int(law.argmax()),)
    return out


def replayed(p, q, rule: str, gamma: int, s: EngineSettings, text_chain: bool = False):
    """E over the target's texts of the replay of ``rule`` on them (``text_chain``, a fault: after a mismatch the
    draft's confidences read along the text instead of along its own chain)."""
    reach, acc, lengths = np.zeros(gamma), np.zeros(gamma), np.zeros(gamma + 1)
    for text in itertools.product(range(V), repeat=N):
        prob = np.prod([p(text[:j])[text[j]] for j in range(N)])
        P = np.stack([p(text[:j]) for j in range(N)])
        QL = np.log(np.stack([q(text[:j]) for j in range(N)]))
        terms = draft_terms(P, QL, np.array(text), 1.0)
        terms["branch"] = branch_table(q, text, terms["drafts"], terms["match"], gamma)
        if text_chain:
            terms["branch"] = np.array([[conf(q(text[:t + 1 + j])) if t + 1 + j <= N else 1.0 for j in range(gamma)]
                                        for t in range(N)])
        row = _Row(np.zeros((N, gamma)), np.zeros((N, gamma)), np.full(N, gamma), engine=terms)
        r = engine_acceptance(OfflineAcceptance(False, "draft_model", gamma, [row]), rule, gamma, s).replay(gamma)
        reach += prob * r.position_drafted
        acc += prob * r.position_accepted
        lengths += prob * r.length_counts
    return reach, acc, lengths


CASES = [("greedy", EngineSettings(temperature=1.0)), ("probabilistic", EngineSettings(temperature=1.0)),
         ("llamacpp", EngineSettings(temperature=1.0)),
         ("llamacpp", EngineSettings(p_min=0.5, temperature=1.0)),
         ("llamacpp", EngineSettings(n_min=2, temperature=1.0)),
         ("llamacpp", EngineSettings(n_min=2, p_min=0.5, temperature=1.0))]


@pytest.mark.parametrize("rule,settings", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_replay_of_each_rule_equals_the_engines_loop_enumerated(rule, settings, seed):
    p, q = tables(seed)
    for gamma in (1, 3):
        want = engine_loop(p, q, rule, gamma, settings)
        got = replayed(p, q, rule, gamma, settings)
        for a, b in zip(got, want):
            assert a == pytest.approx(b, abs=1e-12), (rule, settings, gamma, got, want)
    assert want[1].sum() > 0.05  # not a trivial case (at gamma 3: n-min 2 drops every draft of gamma 1)


def test_greedy_drafts_accept_less_than_sampled_drafts_at_t1():
    """vLLM's default greedy drafts keep x with p(x): on these laws they accept less than the p/q test."""
    p, q = tables(3)
    greedy = engine_loop(p, q, "greedy", 3, EngineSettings())[1].sum()
    sampled = engine_loop(p, q, "probabilistic", 3, EngineSettings())[1].sum()
    assert greedy < sampled


def test_after_a_mismatch_the_draft_goes_on_along_its_own_chain():
    """Under p-min and n-min, how far llama.cpp drafts after a mismatch is read along the draft's own tokens:
    reading it along the text instead misses the engine's loop (the enumeration has the power to see it)."""
    s = EngineSettings(n_min=2, p_min=0.5, temperature=1.0)
    worst = 0.0
    for seed in range(4):
        p, q = tables(seed)
        want = engine_loop(p, q, "llamacpp", 3, s)
        wrong = replayed(p, q, "llamacpp", 3, s, text_chain=True)
        worst = max(worst, max(float(np.abs(a - b).max()) for a, b in zip(wrong, want)))
    assert worst > 1e-4


def test_stop_lengths_follow_the_text_then_the_drafts_own_chain():
    conf_ = np.array([0.9, 0.8, 0.2, 0.9])
    match = np.array([1.0, 0.0, 1.0, 1.0])
    branch = np.full((4, 3), np.nan)
    branch[1] = [0.7, 0.1, 0.9]  # after the mismatch at 1: the draft's own chain
    # start 3 reaches the text's end still confident: the cap at the tokens left ends it, not p-min
    assert stop_lengths(conf_, match, branch, 0.5, 4).tolist() == [3, 2, 0, 4]
    assert stop_lengths(conf_, match, branch, 0.0, 4).tolist() == [4, 4, 4, 4]


# --------------------------------------------------------------------------- llama.cpp's server, step by step
@pytest.fixture(scope="module")
def pair():
    target = tiny_lm("llama", seed=0)
    return target, noisy_copy(target, 0.15), tokenizer()


def server_on_text(draft, prompt, text, gamma, n_min, p_min):
    """llama.cpp's server writing ``text`` (its own samples): the first token from the prompt's pass, then drafts
    along the draft's greedy chain (top-10 probability >= p_min, at most gamma and the tokens left minus one,
    dropped under n_min), kept while they match."""
    n = len(text)
    reach, acc, lengths = np.zeros(gamma), np.zeros(gamma), np.zeros(gamma + 1)
    lengths[0] += 1
    pos = 1
    with torch.inference_mode():
        while pos < n:
            chain = []
            while len(chain) < min(gamma, n - pos - 1):
                logits = draft(input_ids=torch.tensor([prompt + text[:pos] + chain])).logits[0, -1].double()
                top = torch.topk(logits, min(10, len(logits))).values
                if float(1 / torch.exp(top - top.max()).sum()) < p_min:
                    break
                chain.append(int(logits.argmax()))
            if len(chain) < n_min:
                chain = []
            lengths[len(chain)] += 1
            m = next((i for i, d in enumerate(chain) if d != text[pos + i]), len(chain))
            reach[:min(m + 1, len(chain))] += 1
            acc[:m] += 1
            pos += m + 1
    return reach, acc, lengths


@pytest.mark.parametrize("temperature,n_min,p_min", [(0.0, 2, 0.35), (1.0, 2, 0.35)])
def test_llamacpp_replay_equals_its_server_loop_on_every_text(pair, temperature, n_min, p_min):
    target, draft, tok = pair
    s = EngineSettings(n_min=n_min, p_min=p_min, temperature=temperature)
    acc = measure_acceptance(target, tok, PROMPTS, draft=draft, max_new_tokens=16, max_gamma=4, stop_at_eos=False,
                             temperature=temperature, seed=5, row_terms=RowTerms(s, draft=draft, max_gamma=4))
    view = engine_acceptance(acc, "llamacpp", 4, s)
    got = view.replay(4)
    for r in view.rows:  # the text's own outcomes in place of their expectation given the prefix
        r.alpha = r.w
    own = view.replay(4)
    want = [np.zeros(4), np.zeros(4), np.zeros(5)]
    for prompt, text in zip(PROMPTS, acc.texts):
        for total, part in zip(want, server_on_text(draft, tok(prompt)["input_ids"], text, 4, n_min, p_min)):
            total += part
    assert want[2][1:].sum() > 0 and want[2][0] > len(PROMPTS)  # drafts happen, and some steps are plain
    assert got.position_drafted.tolist() == pytest.approx(want[0].tolist(), abs=1e-9)
    assert got.length_counts.tolist() == pytest.approx(want[2].tolist(), abs=1e-9)
    assert own.position_accepted.tolist() == pytest.approx(want[1].tolist(), abs=1e-9)
    if temperature == 0:  # greedy: the expectation given the prefix is the text's own outcome
        assert got.position_accepted.tolist() == pytest.approx(want[1].tolist(), abs=1e-9)


# --------------------------------------------------------------------------------- llama.cpp's ngram-simple
def test_ngram_simple_copies_after_the_last_earlier_match():
    hist = [9, 1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 8, 1, 2]
    assert ngram_simple(hist, 2, 3) == [3, 6, 7]  # "1 2" last seen at 6, searched backwards
    assert ngram_simple(hist, 2, 1) == []  # fewer than n tokens copied: no draft
    assert ngram_simple(hist, 3, 4) == []  # "8 1 2" never seen before
    assert ngram_simple([1, 2, 1, 2], 1, 1) == []  # a history of at most n + m + 1 tokens drafts nothing


@pytest.mark.parametrize("size_n", [1, 2])
def test_ngram_simple_replay_equals_its_loop_on_given_texts(size_n):
    prompt = [5, 6, 7, 5, 6, 8, 5, 6, 7]
    conts = [[5, 6, 7, 5, 6, 8, 5, 6, 9, 5, 6, 7, 5, 6, 8, 1], [7, 5, 6, 7, 5, 5, 6, 7, 5, 6, 8, 5, 6]]
    K = 6
    rows = []
    for cont in conts:
        P = np.eye(10)[cont]  # greedy: the text is the target's argmax
        terms = _ngram_simple_terms(prompt, cont, P, size_n, K)
        rows.append(_Row(np.zeros((len(cont), K)), np.zeros((len(cont), K)), np.zeros(len(cont), int), engine=terms))
    acc = OfflineAcceptance(True, "prompt_lookup", K, rows, conts)
    s = EngineSettings(ngram=size_n)
    drafted_any = 0
    for m in range(1, K + 1):
        got = engine_acceptance(acc, "ngram-simple", m, s).replay(m)
        reach, accd, lengths = np.zeros(m), np.zeros(m), np.zeros(m + 1)
        for cont in conts:
            lengths[0] += 1
            pos = 1
            while pos < len(cont):
                d = ngram_simple(prompt + cont[:pos], size_n, m)[:len(cont) - pos - 1]
                lengths[len(d)] += 1
                k = next((i for i, t in enumerate(d) if t != cont[pos + i]), len(d))
                reach[:min(k + 1, len(d))] += 1
                accd[:k] += 1
                pos += k + 1
        drafted_any += lengths[1:].sum()
        assert got.length_counts.tolist() == lengths.tolist(), m
        assert got.position_drafted.tolist() == reach.tolist(), m
        assert got.position_accepted.tolist() == accd.tolist(), m
    assert drafted_any > 0
