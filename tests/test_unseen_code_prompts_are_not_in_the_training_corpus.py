"""The stdlib pair's unseen prompt sets measure speed on text nobody trained or tuned on: no prompt, and no
three consecutive lines of one, occurs in the pair's training corpus (the Python standard library's
sources), and the sets share no prompt with each other or with the pair's held-out prompts."""
from __future__ import annotations

import json
import pathlib
import sysconfig

import pytest

from exactspec.pairs.load import pair_prompts

SETS = sorted((pathlib.Path(__file__).parent.parent / "benchmarks" / "prompts").glob("unseen_code*.json"))


@pytest.fixture(scope="module")
def corpus() -> str:
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    return "\n".join(p.read_text(errors="ignore") for p in root.rglob("*.py"))


def test_there_are_thirteen_unseen_code_sets_of_sixteen_and_three_of_eight():
    assert sorted(p.name for p in SETS) == sorted(["unseen_code.json"] + [f"unseen_code{i}.json" for i in range(2, 17)])
    for p in SETS:  # unseen_code14, 15 and 16: issue 49's cells, 8 prompts
        eight = p.name in ("unseen_code14.json", "unseen_code15.json", "unseen_code16.json")
        assert len(json.loads(p.read_text())["prompts"]) == (8 if eight else 16), p.name


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.name)
def test_no_unseen_prompt_is_cut_from_the_standard_library(path, corpus):
    assert len(corpus) > 10_000_000  # the sources are there to compare with
    for prompt in json.loads(path.read_text())["prompts"]:
        assert prompt not in corpus
        lines = [line for line in prompt.splitlines() if line.strip()]
        for i in range(len(lines) - 2):
            window = "\n".join(lines[i:i + 3])
            assert window not in corpus, (path.name, window)


def test_the_sets_share_no_prompt_with_each_other_or_the_held_out_prompts():
    seen = set(pair_prompts("stdlib"))
    for p in SETS:
        prompts = set(json.loads(p.read_text())["prompts"])
        assert not prompts & seen, p.name
        seen |= prompts
