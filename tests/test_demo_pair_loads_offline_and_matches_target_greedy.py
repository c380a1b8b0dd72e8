"""The shipped demo pair loads with no network, has the promised shape, and speculative greedy decoding on it
reproduces the target's own greedy `generate` token for token."""
import json

import pytest
import torch

from exactspec import SpeculativeGenerator, load_demo_pair
from exactspec.pairs.stdlib import PAIR_DIR, demo_prompts, training_report


@pytest.fixture(scope="module")
def pair64():
    # float64 removes near-ties between the batched verification pass and one-token decoding.
    return load_demo_pair(dtype=torch.float64)


def test_pair_loads_offline_with_promised_sizes(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    target, draft, tokenizer = load_demo_pair()
    assert type(target).__name__ == "LlamaForCausalLM" and type(draft).__name__ == "LlamaForCausalLM"
    assert target.dtype == torch.float32 and draft.dtype == torch.float16  # the draft in its stored precision
    n_target = sum(p.numel() for p in target.parameters())
    n_draft = sum(p.numel() for p in draft.parameters())
    assert n_target >= 20_000_000
    assert n_draft * 4 <= n_target
    assert tokenizer.eos_token_id is not None and len(tokenizer) == target.config.vocab_size
    assert tokenizer.decode(tokenizer("def f(x):\n    return x")["input_ids"]) == "def f(x):\n    return x"


def test_pair_files_fit_the_budget_and_record_their_provenance():
    size = sum(p.stat().st_size for p in PAIR_DIR.rglob("*") if p.is_file())
    assert size <= 80 * 2**20
    manifest = json.loads((PAIR_DIR / "manifest.json").read_text())
    assert manifest["python"] and manifest["heldout"] and manifest["train"]
    assert all(len(f["sha256"]) == 64 for f in manifest["heldout"] + manifest["train"])
    held = {f["path"] for f in manifest["heldout"]}
    assert held.isdisjoint(f["path"] for f in manifest["train"])
    report = training_report()
    assert report["heldout"]["target_loss"] > 0 and 0 < report["heldout"]["alpha_t1"] <= 1
    prompts = json.loads((PAIR_DIR / "prompts.json").read_text())["prompts"]
    assert prompts and all(p["file"] in held for p in prompts)


@pytest.mark.parametrize("method", ["token", "block"])
def test_greedy_speculative_equals_target_generate_on_demo_pair(pair64, method):
    target, draft, tokenizer = pair64
    tokenizer.padding_side = "left"
    enc = tokenizer(demo_prompts()[:2], return_tensors="pt", padding=True)
    ref = target.generate(**enc, max_new_tokens=24, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                          eos_token_id=None)
    out = SpeculativeGenerator(target, draft).generate(
        enc["input_ids"], enc["attention_mask"], max_new_tokens=24, do_sample=False, gamma=4, method=method,
        eos_token_id=[], pad_token_id=tokenizer.pad_token_id)
    assert out.stats.accepted_tokens > 0  # the draft really did contribute tokens
    torch.testing.assert_close(out.sequences, ref, rtol=0, atol=0)


def test_the_default_pair_with_its_fp16_draft_still_decodes_as_the_fp32_target_alone():
    """As loaded by default (fp32 target, fp16 draft), greedy speculation is still the target's own greedy
    decoding, on a ragged batch; the draft's rounding only changes how many tokens it gets accepted."""
    target, draft, tokenizer = load_demo_pair()
    tokenizer.padding_side = "left"
    enc = tokenizer(demo_prompts()[2:5], return_tensors="pt", padding=True)
    ref = target.generate(**enc, max_new_tokens=24, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                          eos_token_id=None)
    out = SpeculativeGenerator(target, draft).generate(
        enc["input_ids"], enc["attention_mask"], max_new_tokens=24, do_sample=False,
        eos_token_id=[], pad_token_id=tokenizer.pad_token_id)
    assert out.stats.accepted_tokens > 0
    torch.testing.assert_close(out.sequences, ref, rtol=0, atol=0)
