"""The model seam: the one place the engine learns how a model runs.

The engine (the loop, drafters, policies, trees, cost measurement) never calls a model directly. It opens a
*session* on it, one per run, and talks to the session. A session holds B rows; its slots are the columns
every call appends (one per fed token, real or not, in every row), and these are all the calls there are:

    session = open_session(model, rows=B, target=True)
    logits = session.forward(tokens, valid)      # prefill or k new tokens: tokens [B, S] int64, valid [B, S]
                                                 # bool (the row's real tokens) -> [B, S, V], causal per row
    logits = session.forward(tokens, valid, logits_to_keep=1)                     # -> [B, 1, V]
    logits = session.forward_tree(tokens, valid, pos, attend, base=start)        # a token tree -> [B, S, V]
    session.keep(start, counts)          # counts [B] int64: row b keeps its first counts[b] real slots fed
                                         # since slot `start` (a chain: pending + accepted drafts)
    session.keep(start, counts, path)    # path [B, W] int64: row b keeps slots start + path[b, :counts[b]],
                                         # in order (a tree's root-to-node path); ends the tree
    session.select_rows(rows)            # rows [B'] int64: the rows still generating
    session.n_real                       # [B] int64: tokens each row holds
    session.length                       # slots so far: `start` / `base` for a later keep / forward_tree
    session.device

Keeping is how a step ends, chain or tree: everything fed since `start` that a row does not keep leaves it,
and what it keeps was computed with exactly the kept tokens before it as context, so nothing is recomputed.
`forward_tree`: `pos [B, S]` the nodes' positions (the row's n_real plus the node's depth), `attend [B, S,
length - base + S]` bool which of the tree's slots (fed since slot `base`, then the new ones) each new slot
sees; every slot also sees its row's tokens before the tree; a tree may be fed in several calls with one
`base`. After `keep`, `length` is `start` plus the slots up to the last one some row kept (a chain) or plus W
(a path); each forward adds its S. Logits at invalid slots are unspecified.

Two backends implement it (tests/test_backend_conformance.py is what a third must pass, by these calls alone):

* transformers models (`torch.nn.Module`): :class:`exactspec.backends.cache.SlotCache` with the lean forward
  (logits equal to transformers' forward, bit for bit, for the target);
* llama.cpp models (:class:`exactspec.backends.llamacpp.LlamaCppLM`, a GGUF file run by ggml): rows are
  sequences of one llama.cpp context, keeping removes a sequence's tail, a tree's branches are sequence ids.

A model object that is not a torch module names its backend by offering ``open_session(rows, target)``, and
``vocab_size`` / ``embed_size`` / ``describe()`` for the checks and cost profiles below; trees are offered
where :func:`supports_trees` says so (both backends here).
"""
from __future__ import annotations

__all__ = ["open_session", "vocab_size", "embed_size", "describe", "supports_trees", "is_backend_model",
           "check_same_vocab",
           "backend_name"]


def is_backend_model(model) -> bool:
    """True for a model run by a backend other than transformers (it opens its own sessions)."""
    return callable(getattr(model, "open_session", None)) and not _is_torch(model)


def backend_name(model) -> str:
    """"transformers" or the backend's own name (``model.backend``, e.g. "llamacpp")."""
    return getattr(model, "backend", "other") if is_backend_model(model) else "transformers"


def open_session(model, rows: int, *, target: bool):
    """A fresh session on `model` for a batch of `rows`; `target`: the model verifies (the transformers
    backend then runs transformers' own ops; a draft may run a fused forward)."""
    if is_backend_model(model):
        return model.open_session(rows, target=target)
    from exactspec.backends.cache import SlotCache

    session = SlotCache(model)
    session.use_lean(rows, target=target)
    return session


def vocab_size(model) -> int:
    """The width of the model's logits (its lm-head rows)."""
    if is_backend_model(model):
        return int(model.vocab_size)
    return int(model.get_output_embeddings().weight.shape[0])


def embed_size(model) -> int:
    """How many token ids the model can take as input."""
    if is_backend_model(model):
        return int(model.embed_size)
    return int(model.get_input_embeddings().num_embeddings)


def describe(model) -> dict:
    """What identifies the model's numerics for a stored cost profile: shapes and dtypes for a torch model,
    the file and its build for a backend model."""
    if is_backend_model(model):
        return model.describe()
    return {"class": type(model).__name__,
            "params": [[n, list(p.shape), str(p.dtype)] for n, p in model.named_parameters()],
            "device": str(next(model.parameters()).device)}


def supports_trees(model) -> bool:
    """Whether sessions on `model` verify a token tree in one call (``forward_tree``, ``keep(..., path)``)."""
    return not is_backend_model(model) or bool(getattr(model, "supports_trees", False))


def _is_torch(model) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return isinstance(model, torch.nn.Module)


def check_same_vocab(target, draft) -> None:
    """ValueError unless `draft` can draft for `target`: two GGUF files must hold the same token list (a
    torch model's head may differ by padding, as before; its tokenizer is checked by the caller)."""
    if not (is_backend_model(target) and is_backend_model(draft)):
        return
    if not (callable(getattr(target, "token_texts", None)) and callable(getattr(draft, "token_texts", None))):
        return
    a, b = target.token_texts(), draft.token_texts()
    if a != b:
        diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        raise ValueError(f"draft: its vocabulary differs from the target's ({len(b)} vs {len(a)} tokens, first "
                         f"difference at id {diff}); speculative decoding needs a shared vocabulary")
