"""The offline measurement (target writes, one teacher-forced pass, the loop replayed in expectation) gives
what `SpeculativeGenerator.generate` counts: exactly on greedy texts (draft model and prompt lookup), and
within sampling noise at T = 1 (tiny random-weight models, no downloads)."""
from __future__ import annotations

import math

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from _spec_models import noisy_copy, tiny_lm
from exactspec import SpeculativeGenerator
from exactspec.deploy.offline import measure_acceptance
from exactspec.speed.stats import GenerationStats

WORDS = ["<pad>", "<unk>", "<eos>"] + [f"w{i}" for i in range(61)]
PROMPTS = ["w5 w6 w7 w5 w6", "w9 w3 w9 w3", "w40 w41 w42 w43 w44 w40", "w12 w30", "w7 w7 w8 w7 w7",
           "w50 w51 w50 w51 w52"]
NEW = 24


def tokenizer():
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")


@pytest.fixture(scope="module")
def pair():
    target = tiny_lm("llama", seed=0)
    return target, noisy_copy(target, 0.08), tokenizer()


def generated(gen, tok, prompts, gamma, sample: bool, seed0: int = 0, method: str = "token") -> GenerationStats:
    runs = []
    for i, p in enumerate(prompts):
        ids = tok(p, return_tensors="pt")["input_ids"]
        runs.append(gen.generate(ids, max_new_tokens=NEW, do_sample=sample, gamma=gamma, eos_token_id=[],
                                 seed=seed0 + i, method=method).stats)
    return GenerationStats.merge(runs)


def counts(xs) -> list[float]:
    return [float(x) for x in xs]


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_replay_reproduces_generate_counts(pair, gamma):
    target, draft, tok = pair
    acc = measure_acceptance(target, tok, PROMPTS, draft=draft, max_new_tokens=NEW, max_gamma=6, stop_at_eos=False)
    rep = acc.replay(gamma)
    st = generated(SpeculativeGenerator(target, draft), tok, PROMPTS, gamma, sample=False)
    assert sum(st.position_accepted) > 0 and st.position_accepted[0] < st.position_drafted[0]  # not trivial
    assert counts(rep.position_drafted) == counts(st.position_drafted)
    assert counts(rep.position_accepted) == counts(st.position_accepted)
    assert counts(rep.length_counts) == counts(st.length_counts)
    assert rep.steps == st.target_calls and rep.tokens == st.new_tokens
    assert rep.acceptance_rate == pytest.approx(st.acceptance_rate)
    assert rep.mean_acceptance_length == pytest.approx(1 + st.accepted_tokens / sum(st.length_counts[1:]))


def test_greedy_prompt_lookup_replay_reproduces_generate_counts(pair):
    target, _, tok = pair
    acc = measure_acceptance(target, tok, PROMPTS, prompt_lookup=True, max_new_tokens=NEW, max_gamma=4,
                             stop_at_eos=False)
    rep = acc.replay(4)
    st = generated(SpeculativeGenerator(target, drafter="prompt_lookup"), tok, PROMPTS, 4, sample=False)
    assert st.length_counts[0] > 0 and sum(st.length_counts[1:]) > 0  # both misses and matches occur
    assert counts(rep.position_drafted) == counts(st.position_drafted)
    assert counts(rep.position_accepted) == counts(st.position_accepted)
    assert counts(rep.length_counts) == counts(st.length_counts)


def test_sampled_replay_matches_generate_within_noise(pair):
    target, draft, tok = pair
    prompts = PROMPTS * 5
    acc = measure_acceptance(target, tok, prompts, draft=draft, max_new_tokens=NEW, temperature=1.0, max_gamma=3,
                             stop_at_eos=False, seed=11)
    planned = acc.replay(3).per_position_acceptance
    st = generated(SpeculativeGenerator(target, draft), tok, prompts, 3, sample=True, seed0=100)
    for a_plan, a_gen, n in zip(planned, st.per_position_acceptance, st.position_drafted):
        se = math.sqrt(max(a_gen * (1 - a_gen), 0.02) / n)  # generate's sampling error dominates
        assert abs(a_plan - a_gen) < 4 * se, (planned, st.per_position_acceptance, st.position_drafted)


def test_sampled_block_replay_matches_generate_within_noise(pair):
    target, draft, tok = pair
    prompts = PROMPTS * 5
    acc = measure_acceptance(target, tok, prompts, draft=draft, max_new_tokens=NEW, temperature=1.0, max_gamma=4,
                             stop_at_eos=False, seed=12)
    assert acc.block_differs
    planned, token = acc.replay(4, "block"), acc.replay(4, "token")
    # block never accepts less than the token rule; on this pair it accepts visibly more
    assert planned.position_accepted.sum() / planned.steps > 1.02 * token.position_accepted.sum() / token.steps
    st = generated(SpeculativeGenerator(target, draft), tok, prompts, 4, sample=True, seed0=300, method="block")
    for a_plan, a_gen, n in zip(planned.per_position_acceptance, st.per_position_acceptance, st.position_drafted):
        se = math.sqrt(max(a_gen * (1 - a_gen), 0.02) / n)
        assert abs(a_plan - a_gen) < 4 * se, (planned.per_position_acceptance, st.per_position_acceptance)
    mean_gen = st.accepted_tokens / st.target_calls
    assert planned.position_accepted.sum() / planned.steps == pytest.approx(mean_gen, rel=0.08)


def _table_dists(V: int, seed: int):
    """A prefix-dependent distribution (a fresh random one per prefix, in first-asked order)."""
    g = torch.Generator().manual_seed(seed)
    table = {}

    def dist(prefix):
        if prefix not in table:
            w = torch.rand(V, generator=g, dtype=torch.float64) ** 3 + 1e-3
            table[prefix] = w / w.sum()
        return table[prefix]
    return dist


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_replay_law_equals_the_rules_enumeration(seed):
    """E over target texts of the replay's A_i equals P(block verification keeps >= i tokens), for every i
    and gamma, with the law of the kept count computed by exactspec.verification.exact from the rule's own formulas."""
    import itertools

    from exactspec.verification import exact
    from exactspec.deploy.offline import _block_rows

    V, K = 3, 3
    pd, qd = _table_dists(V, seed), _table_dists(V, seed + 10)
    for gamma in (1, 2, 3):
        kept = [0.0] * (gamma + 1)  # P(exactly m kept), by enumeration of drafts and coins
        for x, qx in exact._drafts(qd, gamma):
            for m, pr, _ in exact._outcomes(pd, qd, x, "block"):
                kept[m] += qx * pr
        at_least = [sum(kept[m:]) for m in range(1, gamma + 1)]
        a_mean, ea_mean, token_mean = [0.0] * gamma, [0.0] * gamma, [0.0] * gamma
        for x in itertools.product(range(V), repeat=gamma):  # texts of the target, with their probabilities
            px = 1.0
            for j in range(gamma):
                px *= float(pd(x[:j])[x[j]])
            P = torch.stack([pd(x[:j]) for j in range(gamma)])
            Q = torch.stack([qd(x[:j]) for j in range(gamma)])
            A, EA = _block_rows(P, Q, torch.tensor(x), gamma)
            w = torch.clamp(Q[range(gamma), list(x)] / P[range(gamma), list(x)], max=1.0).cumprod(0)
            for j in range(gamma):
                a_mean[j] += px * A[0, j]
                ea_mean[j] += px * EA[0, j]
                token_mean[j] += px * float(w[j])  # the token rule's A_i: a wrong law for block
        assert a_mean == pytest.approx(at_least, abs=1e-12)
        assert ea_mean == pytest.approx(at_least, abs=1e-12)
        assert at_least[-1] > 0.05  # not a trivial case
        if gamma > 1:  # the check has power: the token rule's products miss block's law by far more than 1e-12
            assert max(abs(a - b) for a, b in zip(token_mean, at_least)) > 1e-5


def test_bad_arguments_name_themselves(pair):
    target, draft, tok = pair
    with pytest.raises(ValueError, match="prompt_lookup"):
        measure_acceptance(target, tok, PROMPTS, max_new_tokens=4)
    with pytest.raises(ValueError, match="max_gamma"):
        measure_acceptance(target, tok, PROMPTS, draft=draft, max_gamma=0)
    with pytest.raises(ValueError, match="top_p"):
        measure_acceptance(target, tok, PROMPTS, draft=draft, temperature=1.0, top_p=2.0)
    acc = measure_acceptance(target, tok, PROMPTS[:1], draft=draft, max_new_tokens=4, max_gamma=2)
    with pytest.raises(ValueError, match="gamma"):
        acc.replay(3)
