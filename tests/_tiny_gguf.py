"""Tiny Llama pairs written by the tests: a Hugging Face directory (random weights, a byte-level BPE tokenizer
trained here) and the same weights as a GGUF file that llama.cpp and transformers both load."""
from __future__ import annotations

import pathlib

import numpy as np
import torch

CORPUS = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i)\n",
          "class Point:\n    def __init__(self, x, y):\n        self.x = x\n", "import os\nimport sys\n",
          "while True:\n    break\n", "if x is None:\n    x = []\n"] * 4


def tokenizer_dir(path: pathlib.Path, vocab: int = 300) -> pathlib.Path:
    """A byte-level BPE tokenizer (GPT-2 style, `<|endoftext|>` = 0) saved as a transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", pad_token="<|endoftext|>")
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(path)
    return path


def llama_dir(path: pathlib.Path, seed: int, layers: int = 2, hidden: int = 64, scale: float = 1.0,
              tok_dir: pathlib.Path | None = None, head_scale: float = 1.0) -> pathlib.Path:
    """A random Llama (fp32) with `tok_dir`'s tokenizer, saved with it in `path`. `scale` multiplies the
    random weights; `head_scale` the lm-head's too (peaked next-token laws, as a trained model's)."""
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tok_dir)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(scale)
        model.lm_head.weight.mul_(head_scale)
    model.generation_config = GenerationConfig(bos_token_id=0, eos_token_id=0, pad_token_id=0)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def gguf_of(hf: pathlib.Path, out: pathlib.Path, outtype: str = "f32") -> pathlib.Path:
    """`hf`'s weights and tokenizer as a GGUF file (exactspec's own converter)."""
    from exactspec.pairs.gguf import convert_to_gguf

    convert_to_gguf(hf, out, outtype=outtype)
    return out


def shallow_copy_dir(hf: pathlib.Path, path: pathlib.Path, layers: int = 1) -> pathlib.Path:
    """A draft for `hf`: its first `layers` layers, embedding and head (so it agrees with it often)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(hf).eval()
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(hf).save_pretrained(path)
    return path


def tiny_pair(root: pathlib.Path, n_ctx: int = 256) -> dict:
    """A tiny target (2 layers) and its 1-layer copy as a draft, each as a transformers dir and a GGUF file
    loaded on llama.cpp (one thread); `hf`: the target on transformers."""
    from transformers import AutoModelForCausalLM

    from exactspec.backends.llamacpp import LlamaCppLM

    tok = tokenizer_dir(root / "tok")
    t_dir = llama_dir(root / "target", seed=1, scale=4.0, head_scale=6.0, tok_dir=tok)
    d_dir = shallow_copy_dir(t_dir, root / "draft")
    t_gguf, d_gguf = gguf_of(t_dir, root / "target.gguf"), gguf_of(d_dir, root / "draft.gguf")
    hf = AutoModelForCausalLM.from_pretrained(t_dir).eval()
    return dict(root=root, tok=tok, t_dir=t_dir, d_dir=d_dir, t_gguf=t_gguf, d_gguf=d_gguf, hf=hf,
                target=LlamaCppLM(t_gguf, threads=1, n_ctx=n_ctx), draft=LlamaCppLM(d_gguf, threads=1, n_ctx=n_ctx))


def law_of_two_tokens(target, prompt: list[int], temperature: float, top_p: float):
    """Exact joint law of the first two new tokens from the backend's own logits: p1 [V], p2 [V, V]."""
    from exactspec.backends.seam import open_session
    from exactspec.verification.sampling import probs_from_logits

    v = target.vocab_size
    with torch.inference_mode():
        s = open_session(target, 1, target=True)
        ids = torch.tensor([prompt])
        p1 = probs_from_logits(s.forward(ids, torch.ones_like(ids, dtype=torch.bool))[0, -1], temperature=temperature,
                               top_p=top_p)
        p2 = torch.zeros(v, v)
        for x in p1.nonzero().flatten().tolist():
            s2 = open_session(target, 1, target=True)
            full = torch.tensor([prompt + [x]])
            p2[x] = probs_from_logits(s2.forward(full, torch.ones_like(full, dtype=torch.bool))[0, -1],
                                      temperature=temperature, top_p=top_p)
    return p1.double(), p2.double()


def chi_square_p(counts: np.ndarray, expected: np.ndarray) -> float:
    from scipy.stats import chisquare

    big = expected >= 5  # bins too small to test are pooled into one
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    return float(chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue)


def assert_two_tokens_follow_the_law(gen, target, *, rows: int, runs: int, temperature: float, top_p: float,
                                     **kwargs) -> None:
    """Draw the first two new tokens `rows` x `runs` times with `gen.generate(..., **kwargs)` (seeds 0..runs-1)
    and check both against the exact law from `target`'s own logits (chi-square), and that the test can tell
    the second token's law from the first's."""
    prompt = [5, 17, 42, 8, 99, 23]
    p1, p2 = law_of_two_tokens(target, prompt, temperature, top_p)
    ids, draws = torch.tensor([prompt] * rows), []
    for seed in range(runs):
        out = gen.generate(ids, max_new_tokens=2, do_sample=True, temperature=temperature, top_k=0, top_p=top_p,
                           eos_token_id=[], seed=seed, **kwargs)
        draws += out.sequences[:, -2:].tolist()
    v = target.vocab_size
    first = np.bincount([a for a, _ in draws], minlength=v)
    assert chi_square_p(first, p1.numpy() * len(draws)) > 1e-3
    second = np.bincount([b for _, b in draws], minlength=v)  # its law: sum over x1 of p1(x1) p2(. | x1)
    assert chi_square_p(second, (p1 @ p2).numpy() * len(draws)) > 1e-3
    assert chi_square_p(second, p1.numpy() * len(draws)) < 1e-3  # the test can tell two laws apart
