"""`exactspec generate` takes a .gguf file (written here with the `gguf` package from a tiny Llama, as
llama.cpp lays it out), applies the tokenizer's chat template with --chat, and ends rows at the
generation config's EOS list; its greedy output equals the original model's own `generate`."""
from __future__ import annotations

import json

import pytest
import torch

from _spec_models import tiny_lm
from exactspec.cli import main
from exactspec.pairs.stdlib import load_pair

gguf = pytest.importorskip("gguf")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOKENS_BEFORE_SPECIALS = 257  # 256 byte tokens and one merge, "he"
BOS, IM_END = 257, 259
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
N_NEW = 12


def _permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's q/k row order (transformers' GGUF loader undoes it)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, path) -> None:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    tokens = [bytes_to_unicode()[b] for b in range(256)] + ["he"] + SPECIALS  # byte-level BPE
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * TOKENS_BEFORE_SPECIALS + [3] * len(SPECIALS))
    w.add_token_merges(["h e"])
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(IM_END)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    for name, t in model.state_dict().items():
        t = t.float()
        if name.endswith("q_proj.weight"):
            t = _permute(t, cfg.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            t = _permute(t, cfg.num_key_value_heads)
        w.add_tensor(names.get_name(name, try_suffixes=(".weight",)), t.numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    model = tiny_lm("llama", vocab=TOKENS_BEFORE_SPECIALS + len(SPECIALS), dtype=torch.float32, init=0.2)
    write_gguf(model, root / "tiny.gguf")
    return model, root


def _cli_json(capsys, *argv):
    assert main(["generate", "--json", "--max-new-tokens", str(N_NEW), *argv]) == 0
    return json.loads(capsys.readouterr().out)


def _reference(model, tok, prompt, eos):
    ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)["input_ids"]
    out = model.generate(input_ids=ids, do_sample=False, max_new_tokens=N_NEW, eos_token_id=eos, pad_token_id=0)
    return out[0, ids.shape[1]:].tolist()


def test_gguf_file_loads_with_its_weights_tokenizer_and_chat_template(files, capsys):
    model, root = files
    target, _, tok = load_pair(str(root / "tiny.gguf"))
    for name, t in model.state_dict().items():
        torch.testing.assert_close(target.state_dict()[name], t, atol=0, rtol=0)
    assert tok.chat_template == CHATML and tok.eos_token == "<|im_end|>"
    assert target.generation_config.eos_token_id == IM_END
    out = _cli_json(capsys, "--target", str(root / "tiny.gguf"), "--prompt-lookup", "--chat", "hello hello")
    assert out["token_ids"][0] == _reference(model, tok, "hello hello", eos=IM_END)
    plain = tok("hello hello", return_tensors="pt")["input_ids"]  # without the template: other text
    assert model.generate(input_ids=plain, do_sample=False, max_new_tokens=N_NEW, eos_token_id=IM_END,
                          pad_token_id=0)[0, plain.shape[1]:].tolist() != out["token_ids"][0]


def test_chat_prompt_rows_end_at_any_eos_of_the_config_list(files, capsys, tmp_path):
    model, root = files
    _, _, tok = load_pair(str(root / "tiny.gguf"))
    free = _reference(model, tok, "abc", eos=None)  # the model's greedy text with no EOS at all
    stop = free[3]
    model.generation_config.eos_token_id = [BOS, stop]  # a list, as chat models ship it
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    out = _cli_json(capsys, "--target", str(tmp_path / "m"), "--prompt-lookup", "--chat", "abc")
    assert out["token_ids"][0] == free[:free.index(stop) + 1]


def test_missing_gguf_file_and_chat_without_template_exit_2(files, capsys, tmp_path):
    model, _ = files
    assert main(["generate", "--target", str(tmp_path / "none.gguf"), "--prompt-lookup", "x"]) == 2
    assert "gguf" in capsys.readouterr().err
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    model.generation_config.eos_token_id = None
    model.save_pretrained(tmp_path / "plain")
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")),
                            unk_token="<unk>").save_pretrained(tmp_path / "plain")
    assert main(["generate", "--target", str(tmp_path / "plain"), "--prompt-lookup", "--chat", "a"]) == 2
    assert "chat template" in capsys.readouterr().err
