"""A Hugging Face Llama checkpoint written as a GGUF file that llama.cpp (and transformers) load.

    python -m exactspec.pairs.gguf HF_DIR OUT.gguf [--outtype f16|f32|q8_0|q4_0]

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
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

__all__ = ["convert_to_gguf", "permute_rope", "stdlib_gguf", "export_smollm2_draft", "smollm2_draft_gguf"]


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


_QTYPES = ("f32", "f16", "q8_0", "q4_0")


def _file_type(gguf, qtype: str):
    """The GGUF file-type field of a file whose matrices are `qtype`."""
    return {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
            "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}[qtype]


def _put(w, name: str, t: np.ndarray, qtype: str) -> None:
    """Add tensor `t` to the writer `w` as `qtype`; 1-D tensors (norms) stay f32, as in every llama.cpp file."""
    import gguf

    t = np.ascontiguousarray(t.astype(np.float32))
    if t.ndim < 2 or qtype == "f32":
        w.add_tensor(name, t)
    elif qtype == "f16":
        w.add_tensor(name, t.astype(np.float16))
    else:
        qt = getattr(gguf.GGMLQuantizationType, qtype.upper())
        w.add_tensor(name, gguf.quants.quantize(t, qt), raw_dtype=qt)  # byte shape: rows kept


def convert_to_gguf(hf_dir: str | Path, out_path: str | Path, outtype: str = "f16", pre: str = "trillion") -> Path:
    """Write the Llama checkpoint in `hf_dir` (safetensors, config.json, tokenizer.json) as a GGUF file at
    `out_path`, weights in `outtype` ("f32", "f16", or llama.cpp's "q8_0" / "q4_0" block quantizations, which
    need rows of a multiple of 32; norms stay f32). Returns `out_path`."""
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
    if outtype not in _QTYPES:
        raise ValueError(f"outtype must be one of {', '.join(_QTYPES)}, got {outtype!r}")

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
    w.add_file_type(_file_type(gguf, outtype))
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
        if outtype.startswith("q") and t.ndim >= 2 and t.shape[-1] % 32:
            raise ValueError(f"outtype {outtype}: {hf_name} has rows of {t.shape[-1]} values, not a multiple of 32")
        _put(w, gg_name, t, outtype)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out_path


# ------------------------------------------------------------------------------------ the stdlib pair
def stdlib_gguf(outtype: str = "f16") -> tuple[Path, Path]:
    """`(target.gguf, draft.gguf)` of the shipped stdlib pair, converted on first use into the cache
    (``$EXACTSPEC_CACHE/gguf-stdlib-<hash>-<outtype>``, a few seconds) and checked on every later use (sizes
    always, sha256 once per process); a damaged copy is rebuilt, saying so on stderr.

    f16 by default: the weights are the pair's own fp16 (nothing is rounded away), and on this project's 2-core
    VM (llama.cpp 0.3.36, 2 threads; docs/history.md, "The llama.cpp backend") the f16 files ran exactspec's
    loop faster than f32 in every system measured: the target alone 1.7x, speculative 1.1-1.3x."""
    from exactspec.backends.cachecheck import file_sha256

    if outtype not in ("f16", "f32"):
        raise ValueError(f"outtype must be 'f16' or 'f32', got {outtype!r}")
    pair = Path(__file__).resolve().parent / "demo_pair"
    digest = hashlib.sha256()
    for part in ("target", "draft"):  # the name follows the weights' bytes (not a clone's file times): a
        digest.update(file_sha256(pair / part / "model.safetensors").encode())  # retrained pair converts anew

    def build(tmp: Path) -> None:
        for part in ("target", "draft"):
            convert_to_gguf(pair / part, tmp / f"{part}.gguf", outtype)

    out = _cached(f"gguf-stdlib-{digest.hexdigest()[:12]}-{outtype}", "the cached GGUF stdlib pair", build,
                  source="exactspec stdlib pair", outtype=outtype)
    return out / "target.gguf", out / "draft.gguf"


def _cached(name: str, what: str, build, **meta) -> Path:
    """The cache directory `name`, made by `build(tmp_dir)` when missing or damaged: written into a temporary
    sibling with a manifest (:mod:`exactspec.backends.cachecheck`), then renamed into place, so a reader never
    sees half a conversion; a copy whose files do not match their manifest is moved aside and rebuilt."""
    from exactspec.backends.cachecheck import check_dir, write_manifest
    from exactspec.backends.cachedir import cache_root

    out = cache_root() / name
    if out.exists():
        problem = check_dir(out)
        if problem is None:
            return out
        print(f"exactspec: {what} in {out} cannot be trusted ({problem}); rebuilding it", file=sys.stderr,
              flush=True)
        aside = out.with_name(out.name + f".damaged{os.getpid()}")
        try:
            out.rename(aside)
        except FileNotFoundError:  # another process moved it first
            pass
        shutil.rmtree(aside, ignore_errors=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        build(tmp)
        write_manifest(tmp, **meta)
        try:
            tmp.rename(out)
        except OSError:  # another process finished first: use its copy
            if check_dir(out) is not None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# ------------------------------------------------------------------------------------ the smollm2 draft


def export_smollm2_draft(out_path, layers: str = "q8_0", head: str = "q4_0", target_gguf=None,
                         draft_dir=None) -> Path:
    """The shipped smollm2 draft (2 layers, a head over 8,192 tokens) as a GGUF file llama.cpp runs.

    Its token embedding is the target file's own Q8_0 table, copied byte for byte (the torch draft reads the
    same values, dequantized); the tokenizer and hyperparameters are the target file's (block count 2). The
    head becomes a full `[V, H]` output matrix: llama.cpp's Llama head has no bias, so the -inf outside the
    subset cannot be written; those rows are zero (logit 0) and the subset's ids are stored under
    ``exactspec.draft.token_ids``, which :class:`exactspec.pairs.smollm2.SubsetLlamaCppLM` reads to put the -inf back (then q is
    the torch draft's q up to rounding). `layers` / `head`: the types of the layers' matrices and of the head
    ("f32", "f16" (the stored weights, nothing rounded), "q8_0", "q4_0"); the draft's numerics never decide
    exactness, only acceptance and speed. Default Q8_0 layers and a Q4_0 head: the fastest draft call measured
    (1.7 ms, against 2.7 ms for f16/Q8_0 and 5.5 ms for the torch draft; 2 threads) with the same greedy
    acceptance (`training/export_smollm2_draft_gguf.py --measure`)."""
    import gguf
    from safetensors.numpy import load_file

    from exactspec.pairs import smollm2
    from exactspec.pairs.smollm2 import DRAFT_TOKEN_IDS_KEY

    for arg, val in (("layers", layers), ("head", head)):
        if val not in _QTYPES:
            raise ValueError(f"{arg} must be one of {', '.join(_QTYPES)}, got {val!r}")
    src = gguf.GGUFReader(str(target_gguf or smollm2.gguf_path()))
    draft_dir = Path(draft_dir or smollm2.PAIR_DIR)
    n_layers = json.loads((draft_dir / "draft.json").read_text())["num_layers"]
    sd = load_file(str(draft_dir / "draft.safetensors"))
    token_ids = sd.pop("lm_head.token_ids").astype(np.int64)  # [S]
    w = gguf.GGUFWriter(str(out_path), "llama")
    for field in src.fields.values():  # every key of the target's but the file's own framing
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", "general.file_type",
                                                            "llama.block_count", "general.name"):
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), field.types[0], sub)
    w.add_name("exactspec smollm2 draft")
    w.add_block_count(n_layers)
    w.add_file_type(_file_type(gguf, layers))
    w.add_array(DRAFT_TOKEN_IDS_KEY, token_ids.astype(np.int32).tolist())
    n_head = int(src.get_field("llama.attention.head_count").contents())
    n_head_kv = int(src.get_field("llama.attention.head_count_kv").contents())

    emb = next(t for t in src.tensors if t.name == "token_embd.weight")
    w.add_tensor(emb.name, np.asarray(emb.data), raw_dtype=emb.tensor_type)  # as stored, bytes unchanged
    names = _tensor_name_map(n_layers)
    for hf_name, t in sd.items():
        if hf_name == "lm_head.weight":
            continue
        if hf_name.endswith("q_proj.weight"):
            t = permute_rope(t.astype(np.float32), n_head)
        elif hf_name.endswith("k_proj.weight"):
            t = permute_rope(t.astype(np.float32), n_head_kv)
        _put(w, names[hf_name], t, layers)
    full = np.zeros((int(src.get_field("llama.vocab_size").contents()), sd["lm_head.weight"].shape[1]), np.float32)
    full[token_ids] = sd["lm_head.weight"]  # [V, H]: the subset's rows, zeros elsewhere
    _put(w, "output.weight", full, head)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(out_path)


def smollm2_draft_gguf(layers: str = "q8_0", head: str = "q4_0") -> Path:
    """The smollm2 draft's GGUF file, exported on first use into the cache (~10 s; named by the draft's and the
    target file's sha256) and checked like every cached file; the target file's tokenizer and generation
    config are saved beside it (``AutoTokenizer.from_pretrained(path.parent)``)."""
    from exactspec.backends.cachecheck import file_sha256
    from exactspec.pairs import smollm2

    digest = hashlib.sha256()
    for path in (smollm2.PAIR_DIR / "draft.safetensors", smollm2.gguf_path()):
        digest.update(file_sha256(path).encode())

    def build(tmp: Path) -> None:
        import contextlib
        import io

        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        export_smollm2_draft(tmp / "draft.gguf", layers, head)
        src = smollm2.gguf_path()  # transformers' reading of the target file's tokenizer and generation
        with contextlib.redirect_stderr(io.StringIO()):  # settings, kept beside the draft: a llama.cpp pair
            AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name, local_files_only=True).save_pretrained(tmp)
            config = AutoConfig.from_pretrained(src.parent, gguf_file=src.name, local_files_only=True)
        GenerationConfig.from_model_config(config).save_pretrained(tmp)  # then needs no dequantized target

    out = _cached(f"gguf-smollm2-draft-{digest.hexdigest()[:12]}-{layers}-{head}", "the cached smollm2 draft GGUF",
                  build, source="exactspec smollm2 draft", layers=layers, head=head)
    return out / "draft.gguf"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exactspec.pairs.gguf", description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=list(_QTYPES), default="f16",
                    help="f16 (default: fp16 checkpoints lose nothing), f32, or llama.cpp's q8_0 / q4_0 (smaller, "
                         "and on a CPU often faster; a slightly different model, whose own p exactspec verifies with)")
    a = ap.parse_args(argv)
    p = convert_to_gguf(a.hf_dir, a.out, a.outtype)
    print(f"wrote {p} ({p.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
