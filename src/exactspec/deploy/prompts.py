"""Prompt files for planning: a JSON list, JSONL, blank-line-separated text, or Spec-Bench's ``question.jsonl``.

Spec-Bench (Xia et al. 2024) ships its questions as JSONL rows ``{"question_id", "category", "turns": [...]}``;
a row's first turn is its prompt and its ``category`` is kept, so a plan can report acceptance per category
(code at T = 0 and creative writing at T = 1 accept very differently). Any row may carry a ``category``.
"""
from __future__ import annotations

import json

__all__ = ["read_prompt_file", "PromptSet"]


class PromptSet(list):
    """The prompts (a list of strings) and, per prompt, its category (None where the file names none)."""

    def __init__(self, prompts, categories=None):
        super().__init__(prompts)
        self.categories = list(categories) if categories is not None else [None] * len(prompts)

    @property
    def has_categories(self) -> bool:
        return any(c is not None for c in self.categories)


def _entry(item, where: str) -> tuple[str, str | None]:
    """(prompt, category) of one entry: a string, {"prompt"|"text": ...}, or a Spec-Bench row (first turn)."""
    if isinstance(item, str):
        return item, None
    if isinstance(item, dict):
        text = item.get("prompt", item.get("text"))
        if text is None and isinstance(item.get("turns"), list) and item["turns"]:
            text = item["turns"][0]
        cat = item.get("category")
        if isinstance(text, str) and (cat is None or isinstance(cat, str)):
            return text, cat
    raise ValueError(f"{where}: each entry must be a string, have a 'prompt' field, or be a Spec-Bench row "
                     "with 'turns' (a list of strings)")


def read_prompt_file(path: str, option: str = "--prompts") -> PromptSet:
    """Prompts from a JSON list (strings or {"prompt"|"text": ...}; or {"prompts": [...]}), JSONL (one such entry
    per line, or Spec-Bench rows), or blank-line-separated text. Errors are ValueErrors naming ``option``."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ValueError(f"cannot read {option} {path!r}: {exc.strerror or exc}") from None
    where = f"{option} {path!r}"
    stripped = text.strip()
    try:
        if path.endswith(".jsonl"):
            items = [json.loads(line) for line in stripped.splitlines() if line.strip()]
        elif path.endswith(".json"):
            data = json.loads(stripped)
            items = data.get("prompts", data) if isinstance(data, dict) else data
            if not isinstance(items, list):
                raise ValueError(f"{where}: expected a JSON list of prompts")
        else:
            items = [b.strip("\n") for b in text.split("\n\n") if b.strip()]
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON: {exc}") from None
    pairs = [_entry(x, where) for x in items]
    if not pairs or not all(p for p, _ in pairs):
        raise ValueError(f"{where} has no (or empty) prompts")
    return PromptSet([p for p, _ in pairs], [c for _, c in pairs])
