#!/usr/bin/env python3
"""Write a llama.cpp GGUF (f32 or f16) from a small HF Llama checkpoint directory.

Usage: python convert_hf_llama_to_gguf.py HF_DIR OUT.gguf [--outtype f32|f16]

Needs: numpy, safetensors, gguf (PyPI).  No torch, no transformers.

Tensor layout follows llama.cpp's convert_hf_to_gguf.py LlamaModel (vendored in llama-cpp-python
0.3.36, conversion/llama.py): HF q_proj / k_proj rows are stored per head as [first half | second half]
("rotate_half" RoPE); llama.cpp's LLAMA arch uses the interleaved (GPT-J style, pairs (2i, 2i+1))
RoPE, so rows are permuted with
    w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)
(n_head = num_key_value_heads for k_proj).  transformers' GGUF loader undoes that permutation.

Tokenizer metadata: tokenizer.ggml.model = "gpt2" (byte-level BPE), tokens and merges copied from
tokenizer.json, bos/eos/unk/pad ids from tokenizer_config.json, add_bos_token = add_eos_token = False
(the HF tokenizer adds nothing).  tokenizer.ggml.pre: llama.cpp only knows pre-tokenizers by name
(src/llama-vocab.cpp).  A HF ByteLevel(use_regex=True) pre-tokenizer applies the GPT-2 split regex; in
llama.cpp both "gpt-2" and "trillion" select that regex, but "gpt-2" also turns on clean_spaces
(detokenization drops the space in " ." / " ,", which HF's ByteLevel decoder keeps), "trillion" does not.
Default --pre trillion: tokenization AND detokenization equal the HF tokenizer's.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

import gguf

TOKEN_TYPE_NORMAL = gguf.TokenType.NORMAL
TOKEN_TYPE_CONTROL = gguf.TokenType.CONTROL
TOKEN_TYPE_USER_DEFINED = gguf.TokenType.USER_DEFINED
TOKEN_TYPE_UNUSED = gguf.TokenType.UNUSED


def permute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotate-half row order -> llama.cpp interleaved row order (same as LlamaModel.permute)."""
    rows = w.shape[0]
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def _tensor_name_map(n_layers: int) -> dict[str, str]:
    m = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for i in range(n_layers):
        for hf, gg in per_layer.items():
            m[f"model.layers.{i}.{hf}"] = f"blk.{i}.{gg}"
    return m


def _add_tokenizer(w: gguf.GGUFWriter, hf_dir: Path, vocab_size: int, pre_name: str = "trillion") -> None:
    tok = json.loads((hf_dir / "tokenizer.json").read_text(encoding="utf-8"))
    model = tok["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"only byte-level BPE tokenizers are supported, got {model.get('type')}")
    pre = tok.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
        print(f"warning: pre_tokenizer {pre.get('type')} is not ByteLevel(use_regex=True); "
              "llama.cpp text tokenization may differ (token-id inputs are unaffected)")
    id2tok: dict[int, str] = {i: t for t, i in model["vocab"].items()}
    special_ids = set()
    for at in tok.get("added_tokens", []):
        id2tok[at["id"]] = at["content"]
        if at.get("special", False):
            special_ids.add(at["id"])
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in id2tok:
            tokens.append(f"[PAD{i}]")
            types.append(TOKEN_TYPE_UNUSED)
        else:
            tokens.append(id2tok[i])
            types.append(TOKEN_TYPE_CONTROL if i in special_ids else TOKEN_TYPE_NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre_name)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)

    cfg_path = hf_dir / "tokenizer_config.json"
    tcfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    tok2id = {t: i for i, t in enumerate(tokens)}

    def _id(key):
        v = tcfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        return tok2id.get(v) if v is not None else None

    for key, fn in (("bos_token", w.add_bos_token_id), ("eos_token", w.add_eos_token_id),
                    ("unk_token", w.add_unk_token_id), ("pad_token", w.add_pad_token_id)):
        i = _id(key)
        if i is not None:
            fn(i)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)


def convert(hf_dir: str | Path, out_path: str | Path, outtype: str = "f16", pre: str = "trillion") -> Path:
    hf_dir, out_path = Path(hf_dir), Path(out_path)
    cfg = json.loads((hf_dir / "config.json").read_text())
    if cfg.get("model_type") != "llama":
        raise ValueError(f"not a llama checkpoint: {cfg.get('model_type')}")
    n_layers = cfg["num_hidden_layers"]
    n_head = cfg["num_attention_heads"]
    n_head_kv = cfg.get("num_key_value_heads", n_head)
    hidden = cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or hidden // n_head
    rope = cfg.get("rope_parameters") or {}
    rope_theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    rope_type = rope.get("rope_type", (cfg.get("rope_scaling") or {}).get("rope_type", "default"))
    if rope_type not in ("default", None):
        raise ValueError(f"rope_type {rope_type!r} not handled by this small converter")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise ValueError("bias tensors not handled by this small converter")
    if outtype not in ("f32", "f16"):
        raise ValueError("outtype must be f32 or f16")

    sd = {}
    for f in sorted(hf_dir.glob("*.safetensors")):
        sd.update(load_file(str(f)))
    if "lm_head.weight" not in sd:
        if not cfg.get("tie_word_embeddings", False):
            raise ValueError("lm_head.weight missing and embeddings not tied")
        # llama.cpp falls back to token_embd for the output when output.weight is absent.
    name_map = _tensor_name_map(n_layers)
    unknown = [k for k in sd if k not in name_map and "rotary_emb" not in k]
    if unknown:
        raise ValueError(f"unmapped tensors: {unknown[:5]}")

    w = gguf.GGUFWriter(str(out_path), "llama")
    w.add_name(hf_dir.resolve().name)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if outtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(hidden)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(rope_theta))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    _add_tokenizer(w, hf_dir, cfg["vocab_size"], pre)

    for hf_name, gg_name in name_map.items():
        if hf_name not in sd:
            if hf_name == "lm_head.weight":
                continue
            raise ValueError(f"missing tensor {hf_name}")
        t = sd[hf_name].astype(np.float32)
        if hf_name.endswith("q_proj.weight"):
            t = permute_rope(t, n_head)
        elif hf_name.endswith("k_proj.weight"):
            t = permute_rope(t, n_head_kv)
        # like convert_hf_to_gguf.py: 1-D tensors (norms) stay f32 in f16 files
        if outtype == "f16" and t.ndim >= 2:
            t = t.astype(np.float16)
        w.add_tensor(gg_name, np.ascontiguousarray(t))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out_path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["f32", "f16"], default="f16")
    ap.add_argument("--pre", default="trillion", choices=["trillion", "gpt-2"],
                    help="llama.cpp pre-tokenizer name (both = GPT-2 regex; gpt-2 adds clean_spaces)")
    a = ap.parse_args()
    p = convert(a.hf_dir, a.out, a.outtype, a.pre)
    print(f"wrote {p} ({p.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
