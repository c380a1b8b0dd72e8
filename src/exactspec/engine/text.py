"""Turning streamed token ids into coloured text: which kind each token is, and whole-character pieces."""
from __future__ import annotations


def token_kinds(from_draft: list[bool], drafted: int) -> list[str]:
    """Kinds of one row's tokens from one step: "accepted" (a draft token the target kept), "bonus" (every
    drafted token was kept, so the target's own next token follows) or "corrected" (drawn from the residual
    after a rejection)."""
    last = "bonus" if sum(from_draft) >= drafted else "corrected"
    return ["accepted" if fd else last for fd in from_draft]


def styled_pieces(tokenizer, ids: list[int], labels: list, start: int = 0) -> list[tuple[str, object]]:
    """Split the decoded text of `ids[start:]` into `(piece, label)` pairs, one per token whose text is
    complete, by decoding growing prefixes: a multi-byte character split across tokens comes out whole,
    with the label of the token that completed it."""
    # A character left incomplete at `start` was not shown by the previous call: show it now, whole.
    out, prev = [], tokenizer.decode(ids[:start], skip_special_tokens=True).rstrip("\ufffd")
    for i in range(start, len(ids)):
        text = tokenizer.decode(ids[: i + 1], skip_special_tokens=True)
        if text.startswith(prev) and not text.endswith("\ufffd"):
            out.append((text[len(prev):], labels[i]))
            prev = text
    return out
