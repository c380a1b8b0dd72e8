"""Cut demo and benchmark prompts out of the held-out standard-library files and ship them with the pair.

A prompt is the text of a held-out file up to and including the header line of a function (`def ...:`),
trimmed at the front to at most --max-tokens tokens on a line boundary, so the model's job is to write the
function body. The prompts are stored in `src/exactspec/pairs/demo_pair/prompts.json` (with the file name, the
line number and the file's sha256 from the manifest), so the demo and the benchmark do not depend on the
user's own Python installation.

    python training/make_prompts.py
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sysconfig

HERE = pathlib.Path(__file__).resolve().parent
PAIR = HERE.parent / "src" / "exactspec" / "demo_pair"


def cut_prompts(text: str, tokenizer, max_tokens: int, per_file: int) -> list[tuple[int, str]]:
    lines = text.splitlines(keepends=True)
    # Token counts per line, once: a prompt's length is close to the sum over its lines (checked below).
    counts = [len(ids) for ids in tokenizer(lines)["input_ids"]] if lines else []
    found = []
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        # A one-line `def` header whose body starts on the next line, deep enough into the file to have context.
        if stripped.startswith("def ") and line.rstrip().endswith(":") and i >= 20:
            start, total = i + 1, 0
            while start > 0 and total + counts[start - 1] <= max_tokens:
                start -= 1
                total += counts[start]
            head = lines[start: i + 1]
            while len(head) > 1 and len(tokenizer("".join(head))["input_ids"]) > max_tokens:
                head = head[1:]
            found.append((i + 1, "".join(head)))
    # Spread the picks over the file rather than taking its first functions.
    if len(found) > per_file:
        step = len(found) / per_file
        found = [found[int(k * step)] for k in range(per_file)]
    return found


def main(argv=None) -> None:
    from transformers import AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--per-file", type=int, default=2)
    ap.add_argument("--count", type=int, default=24)
    args = ap.parse_args(argv)
    manifest = json.loads((PAIR / "manifest.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(PAIR / "target", local_files_only=True)
    tokenizer.model_max_length = 10**9  # we only count tokens here; the trimming keeps prompts short
    lib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    prompts = []
    for entry in manifest["heldout"]:
        text = (lib / entry["path"]).read_text(encoding="utf-8", errors="replace")
        for line, prompt in cut_prompts(text, tokenizer, args.max_tokens, args.per_file):
            prompts.append({"file": entry["path"], "line": line, "sha256": entry["sha256"], "text": prompt})
    prompts = prompts[: args.count]
    (PAIR / "prompts.json").write_text(json.dumps({"python": manifest["python"], "prompts": prompts}, indent=1))
    print(f"wrote {len(prompts)} prompts from {len({p['file'] for p in prompts})} held-out files")


if __name__ == "__main__":
    main()
