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
def corpus() -> tuple[str, set[str]]:
    """The sources as one text, and the set of its whole lines."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    text = "\n".join(p.read_text(errors="ignore") for p in root.rglob("*.py"))
    return text, set(text.split("\n"))


def occurs(piece: str, corpus: tuple[str, set[str]]) -> bool:
    """Is `piece` a substring of the corpus text? A line of `piece` between two of its newlines must be a whole
    line of the corpus: where one is not, the answer is no without scanning 10 MB (the scan, once per window, took
    a minute of the suite)."""
    text, lines = corpus
    inner = piece.split("\n")[1:-1]
    if any(line not in lines for line in inner):
        return False
    return piece in text


def test_the_unseen_code_sets_are_those_named_with_sixteen_prompts_or_eight():
    assert sorted(p.name for p in SETS) == sorted(["unseen_code.json"] + [f"unseen_code{i}.json" for i in range(2, 28)])
    for p in SETS:  # unseen_code14 to 27: issue 49's cells, 8 prompts
        eight = p.name in [f"unseen_code{i}.json" for i in range(14, 28)]
        assert len(json.loads(p.read_text())["prompts"]) == (8 if eight else 16), p.name


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.name)
def test_no_unseen_prompt_is_cut_from_the_standard_library(path, corpus):
    assert len(corpus[0]) > 10_000_000  # the sources are there to compare with
    for prompt in json.loads(path.read_text())["prompts"]:
        assert not occurs(prompt, corpus)
        lines = [line for line in prompt.splitlines() if line.strip()]
        for i in range(len(lines) - 2):
            window = "\n".join(lines[i:i + 3])
            assert not occurs(window, corpus), (path.name, window)


def test_the_whole_line_shortcut_finds_what_the_scan_finds(corpus):
    """occurs() against the plain scan, on windows that are in the sources and on ones that are not."""
    text, _ = corpus
    start = text.index("\ndef ", len(text) // 2) + 1
    found = "\n".join(text[start:].split("\n")[:3])
    assert occurs(found, corpus) and found in text
    assert occurs(found[5:], corpus)  # a window may begin inside a line of the sources
    assert not occurs(found + "\n    zzq_unseen()", corpus)
    assert not occurs("def zzq_unseen():\n    pass\n", corpus)


def test_the_sets_share_no_prompt_with_each_other_or_the_held_out_prompts():
    seen = set(pair_prompts("stdlib"))
    for p in SETS:
        prompts = set(json.loads(p.read_text())["prompts"])
        assert not prompts & seen, p.name
        seen |= prompts
