"""A Hugging Face Llama checkpoint written as a GGUF file that llama.cpp (and transformers) load.

    python -m exactspec.pairs.gguf HF_DIR OUT.gguf [--outtype f16|f32]

Tensor layout as llama.cpp's own converter (`convert_hf_to_gguf.py`, LlamaModel): q_proj / k_proj rows are
permuted from Hugging Face's rotate-half order to llama.cpp's interleaved RoPE order; 1-D tensors (norms)
stay f32 in an f16 file; `lm_head` becomes `output.weight`. That converter itself refuses the shipped pairs'
tokenizer (it recognises a BPE pre-tokenizer by hashing its output on a fixed text, and knows only
published models), so the tokenizer is written here: model "gpt2" (byte-level BPE), tokens and merges from
tokenizer.json, and the pre-tokenizer name "trillion", which in llama.cpp selects the plain GPT-2 split regex
(as Hugging Face's ByteLevel) without "gpt-2"'s clean-up of spaces before punctuation. llama.cpp then
tokenizes and detokenizes the stdlib prompts as transformers does; the engine feeds token ids anyway.
Needs the `gguf` package (`pip install 'exactspec[llamacpp]'`); nothing is downloaded.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

__all__ = ["convert_to_gguf", "permute_rope"]


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


def _add_tokenizer(w, hf_dir: Path, vocab_size: int, pre_name: str = "trillion") -> None:
    tok = json.loads((hf_dir / "tokenizer.json").read_text(encoding="utf-8"))
    model = tok["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"only byte-level BPE tokenizers are supported, got {model.get('type')}")
    pre = tok.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
        pass  # llama.cpp's own text tokenization may then differ; the engine feeds token ids only
    id2tok: dict[int, str] = {i: t for t, i in model["vocab"].items()}
    special_ids = set()
    for at in tok.get("added_tokens", []):
        id2tok[at["id"]] = at["content"]
        if at.get("special", False):
            special_ids.add(at["id"])
    import gguf

    tokens, types = [], []
    for i in range(vocab_size):
        if i not in id2tok:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(id2tok[i])
            types.append(gguf.TokenType.CONTROL if i in special_ids else gguf.TokenType.NORMAL)
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


def convert_to_gguf(hf_dir: str | Path, out_path: str | Path, outtype: str = "f16", pre: str = "trillion") -> Path:
    """Write the Llama checkpoint in `hf_dir` (safetensors, config.json, tokenizer.json) as a GGUF file at
    `out_path`, weights in `outtype` ("f32" or "f16"; norms stay f32). Returns `out_path`."""
    import gguf
    from safetensors.numpy import load_file

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exactspec.pairs.gguf", description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["f32", "f16"], default="f16")
    a = ap.parse_args(argv)
    p = convert_to_gguf(a.hf_dir, a.out, a.outtype)
    print(f"wrote {p} ({p.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# ------------------------------------------------------------------------------------ the stdlib pair
def stdlib_gguf(outtype: str = "f16") -> tuple[Path, Path]:
    """`(target.gguf, draft.gguf)` of the shipped stdlib pair, converted on first use into the cache
    (``$EXACTSPEC_CACHE/gguf-stdlib-<hash>-<outtype>``, a few seconds) and checked on every later use (sizes
    always, sha256 once per process); a damaged copy is rebuilt, saying so on stderr.

    f16 by default: measured here (2 threads, llama.cpp 0.3.36) its target decodes alone at 1.6x the f32
    file's tokens/s (1.7-2.0 ms against 2.6-3.3 ms a token); the f16 weights are the pair's own, so nothing is
    rounded away."""
    import hashlib
    import os
    import shutil
    import sys

    from exactspec.backends.cachecheck import check_dir, write_manifest
    from exactspec.backends.cachedir import cache_root

    if outtype not in ("f16", "f32"):
        raise ValueError(f"outtype must be 'f16' or 'f32', got {outtype!r}")
    pair = Path(__file__).resolve().parent / "demo_pair"
    from exactspec.backends.cachecheck import file_sha256

    digest = hashlib.sha256()
    for part in ("target", "draft"):  # the name follows the weights' bytes (not a clone's file times): a
        digest.update(file_sha256(pair / part / "model.safetensors").encode())  # retrained pair converts anew
    out = cache_root() / f"gguf-stdlib-{digest.hexdigest()[:12]}-{outtype}"
    files = (out / "target.gguf", out / "draft.gguf")
    if out.exists():
        problem = check_dir(out)
        if problem is None:
            return files
        print(f"exactspec: the cached GGUF stdlib pair in {out} cannot be trusted ({problem}); rebuilding it",
              file=sys.stderr, flush=True)
        aside = out.with_name(out.name + f".damaged{os.getpid()}")
        try:
            out.rename(aside)
        except FileNotFoundError:
            pass
        shutil.rmtree(aside, ignore_errors=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for part in ("target", "draft"):
            convert_to_gguf(pair / part, tmp / f"{part}.gguf", outtype)
        write_manifest(tmp, source="exactspec stdlib pair", outtype=outtype)
        try:
            tmp.rename(out)
        except OSError:  # another process finished first: use its copy
            if check_dir(out) is not None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return files
