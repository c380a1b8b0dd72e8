"""`exactspec generate` loads local models offline, streams coloured text, and reports statistics
(a table, or one JSON object with --json); bad input exits with code 2 and a message."""
from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from _spec_models import noisy_copy, tiny_lm
from exactspec.cli import main

WORDS = ["<pad>", "<unk>", "<eos>"] + [f"w{i}" for i in range(61)]


def _tokenizer(words):
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                   eos_token="<eos>")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    target = tiny_lm("llama", seed=0, dtype=torch.float32)
    for name, model, words in (("target", target, WORDS), ("draft", noisy_copy(target, 0.05), WORDS),
                               ("other", noisy_copy(target, 0.05), WORDS[:3] + WORDS[:2:-1])):
        model.save_pretrained(root / name)
        _tokenizer(words).save_pretrained(root / name)
    return root


def test_json_output_has_text_and_consistent_stats(pair, capsys):
    rc = main(["generate", "--target", str(pair / "target"), "--draft", str(pair / "draft"), "--json",
               "--max-new-tokens", "9", "--seed", "0", "--gamma", "3", "w5 w6 w7 w5 w6"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    ids = out["token_ids"][0]
    assert 1 <= len(ids) <= 9 and out["stats"]["new_tokens"] == len(ids)
    assert out["text"] == out["texts"][0]
    assert out["stats"]["accepted_tokens"] <= out["stats"]["drafted_tokens"]
    assert "mean_accepted_per_step" in out["stats"] and "mean_tokens_per_step" in out["stats"]


def test_streamed_text_and_table_with_prompt_lookup_and_batch(pair, capsys):
    rc = main(["generate", "--target", str(pair / "target"), "--prompt-lookup", "--temperature", "0",
               "--max-new-tokens", "6", "--gamma", "auto", "--ngram", "2", "w5 w6 w7 w5 w6", "w9 w9"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "w5 w6 w7 w5 w6" in text and "statistics" in text and "tokens / second" in text


@pytest.mark.parametrize("argv,message", [
    (["--gamma", "0"], "gamma"),
    (["--method", "token", "--top-p", "2"], "--top-p"),
    (["--draft-other"], "differs"),
    (["--draft-dtype", "float8"], "--draft-dtype"),
])
def test_bad_input_exits_2_with_message(pair, capsys, argv, message):
    draft = str(pair / ("other" if argv == ["--draft-other"] else "draft"))
    argv = [] if argv == ["--draft-other"] else argv
    rc = main(["generate", "--target", str(pair / "target"), "--draft", draft, *argv, "w1 w2"])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_a_half_precision_draft_keeps_greedy_output_the_targets(pair, capsys):
    """--draft-dtype float16/bfloat16 runs the draft in that dtype under the fp32 target: greedy output is
    still the target's own, token for token; with --prompt-lookup there is no draft to cast (exit 2)."""
    base = ["generate", "--target", str(pair / "target"), "--json", "--max-new-tokens", "12", "--temperature", "0",
            "--gamma", "3", "w5 w6 w7 w5 w6"]
    assert main([*base, "--draft", str(pair / "draft")]) == 0
    reference = json.loads(capsys.readouterr().out)["token_ids"]
    for dtype in ("float16", "bfloat16"):
        assert main([*base, "--draft", str(pair / "draft"), "--draft-dtype", dtype]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["token_ids"] == reference and out["stats"]["drafted_tokens"] > 0
    assert main([*base, "--prompt-lookup", "--draft-dtype", "float16"]) == 2
    err = capsys.readouterr().err
    assert "--draft-dtype" in err and len(err.strip().splitlines()) == 1


def test_casting_a_draft_that_borrows_the_targets_embedding_leaves_the_target_as_it_was():
    """The smollm2 draft shares the target's embedding module; draft_in_dtype (behind --draft-dtype) copies
    what is shared before casting, so the target keeps fp32 weights and its own logits (a cast in place would change its law)."""
    from exactspec import SpeculativeGenerator, draft_in_dtype

    target = tiny_lm("llama", seed=0, dtype=torch.float32)
    draft = noisy_copy(target, 0.05)
    draft.model.embed_tokens = target.model.embed_tokens  # borrowed, as exactspec.pairs.smollm2 does
    ids = torch.tensor([[5, 9, 13, 5, 9]])
    with torch.no_grad():
        before = target(ids).logits
    for bad in ("float8", "nn", None, torch.int8):
        with pytest.raises(ValueError, match="dtype"):
            draft_in_dtype(draft, bad, target)
    draft_in_dtype(draft, "float16", target)
    assert all(p.dtype == torch.float32 for p in target.parameters())
    assert draft.model.embed_tokens.weight.dtype == torch.float16
    assert draft.model.embed_tokens.weight.data_ptr() != target.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        assert torch.equal(target(ids).logits, before)
    out = SpeculativeGenerator(target, draft).generate(ids, max_new_tokens=10, do_sample=False, gamma=3,
                                                       eos_token_id=[], pad_token_id=0)
    reference = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
                                eos_token_id=None, pad_token_id=0)
    assert torch.equal(out.sequences, reference)
