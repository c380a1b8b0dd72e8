"""Tiny model folders and the tests' own law server (`tests/_law_server.py`) as a real process, for the audit's
tests."""
from __future__ import annotations

import contextlib
import pathlib
import subprocess
import sys
import time

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from _spec_models import noisy_copy, tiny_lm

HERE = pathlib.Path(__file__).parent
WORDS = ["<pad>", "<unk>", "<eos>"] + [f"w{i}" for i in range(61)]
PROMPTS = ["w5 w6 w7 w5 w6", "w10 w11 w3"]


def _tokenizer():
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")


def make_models(root: pathlib.Path, draft_noise: float = 0.3) -> pathlib.Path:
    """target/, draft/ (a noisy copy: `draft_noise` times each weight's std) and other/ (another model of the same
    vocabulary), with end token 2; and prompts.json."""
    target = tiny_lm("llama", seed=0, dtype=torch.float32, init=0.3)
    for name, model in (("target", target), ("draft", noisy_copy(target, draft_noise)),
                        ("other", tiny_lm("llama", seed=5, dtype=torch.float32, init=0.3))):
        model.config.eos_token_id = model.generation_config.eos_token_id = 2
        model.save_pretrained(root / name)
        _tokenizer().save_pretrained(root / name)
    (root / "prompts.json").write_text('["' + '", "'.join(PROMPTS) + '"]')
    return root


@contextlib.contextmanager
def law_server(*args: str):
    """The tests' law server started with `args`; yields its base URL; stopped on exit."""
    with law_servers(args) as (url,):
        yield url


@contextlib.contextmanager
def law_servers(*argsets):
    """Several law servers, started together (each takes ~3.5 s to import and load; in turn they cost a test half a
    minute); yields their base URLs in order; all stopped on exit."""
    procs = [subprocess.Popen([sys.executable, str(HERE / "_law_server.py"), *a], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for a in argsets]
    try:
        urls = []
        deadline = time.time() + 60 * len(procs)
        for proc in procs:
            line = ""
            while not line.startswith("PORT") and time.time() < deadline:
                line = proc.stdout.readline()
                if not line and proc.poll() is not None:
                    raise RuntimeError(f"the law server exited ({proc.returncode})")
            urls.append(f"http://127.0.0.1:{int(line.split()[1])}")
        yield urls
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
