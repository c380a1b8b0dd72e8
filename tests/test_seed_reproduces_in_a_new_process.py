"""A seed means the same tokens: in a new process (the CLI and a script, each run twice) and on a generator that
has run before, for gamma="auto", a fixed gamma, block verification, prompt lookup, trees and B > 1, at T = 1
and with top-p. gamma="auto" prices a seeded run with the cost profile stored on disk (exactspec.speed.profiles)
and a fresh acceptance model, so nothing timed in the process decides its tokens."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

SCRIPT = r"""
import json, torch
from exactspec import SpeculativeGenerator, load_pair
t, d, tok = load_pair("stdlib")
enc = tok(["def merge(a, b):\n", "class Stack:\n    def push(self, x):\n"], return_tensors="pt", padding=True,
          padding_side="left")
ids, mask = enc["input_ids"], enc["attention_mask"]
kw = dict(max_new_tokens=40, do_sample=True, temperature=1.0, top_k=0, eos_token_id=[], pad_token_id=0, seed=5)
modes = {"auto": {}, "gamma3": {"gamma": 3}, "block": {"method": "block"}, "top_p": {"top_p": 0.9},
         "tree": {"tree": "auto"}}
out = {}
gen = SpeculativeGenerator(t, d)
for name, extra in modes.items():
    out[name] = gen.generate(ids, mask, **kw, **extra).sequences.tolist()
lookup = SpeculativeGenerator(t, drafter="prompt_lookup")
out["lookup"] = lookup.generate(ids, mask, **kw).sequences.tolist()
print(json.dumps(out))
"""


def _env(tmp_path):
    return {**os.environ, "EXACTSPEC_CACHE": str(tmp_path / "cache")}


def test_a_script_with_a_seed_gives_the_same_tokens_in_a_new_process(tmp_path):
    runs = [subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=_env(tmp_path),
                           timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    a, b = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert a == b
    assert a["auto"] != a["gamma3"] or a["auto"] != a["lookup"]  # the modes are not all one run
    assert os.listdir(tmp_path / "cache" / "costs")  # the profile gamma="auto" decided from


def test_the_cli_with_a_seed_prints_the_same_text_in_a_new_process(tmp_path):
    cmd = [sys.executable, "-m", "exactspec", "generate", "def merge(a, b):\n", "--pair", "stdlib", "--seed", "5",
           "--temperature", "1.0", "--max-new-tokens", "48", "--json"]
    texts = []
    for _ in range(3):
        r = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path), timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        texts.append(json.loads(r.stdout)["text"])
    assert texts[0] == texts[1] == texts[2]


def test_a_generator_that_has_run_gives_a_seeded_run_the_same_tokens(tmp_path, monkeypatch):
    monkeypatch.setenv("EXACTSPEC_CACHE", str(tmp_path / "cache"))
    from exactspec import SpeculativeGenerator, load_pair

    t, d, tok = load_pair("stdlib")
    enc = tok(["def merge(a, b):\n"], return_tensors="pt")
    kw = dict(max_new_tokens=40, do_sample=True, temperature=1.0, top_k=0, eos_token_id=[], pad_token_id=0)
    first = SpeculativeGenerator(t, d).generate(enc["input_ids"], enc["attention_mask"], seed=9, **kw).sequences
    gen = SpeculativeGenerator(t, d)
    for i in range(2):  # unseeded runs teach it acceptance and calibrated costs
        gen.generate(enc["input_ids"], enc["attention_mask"], generator=torch.Generator().manual_seed(i), **kw)
    assert gen._drafting
    for _ in range(2):
        assert torch.equal(gen.generate(enc["input_ids"], enc["attention_mask"], seed=9, **kw).sequences, first)


def test_seed_and_generator_together_are_refused():
    import pytest

    from exactspec import SpeculativeGenerator, load_pair

    t, d, tok = load_pair("stdlib")
    with pytest.raises(ValueError, match="seed or generator"):
        SpeculativeGenerator(t, d).generate(torch.tensor([[5, 6]]), max_new_tokens=2, seed=1,
                                            generator=torch.Generator())
