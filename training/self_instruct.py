"""Self-instruct chat prompts for distilling the SmolLM2 draft: the target writes the user messages itself.

Why: the draft's acceptance on hand-written prompts (benchmarks/prompts/unseen_chat*.json) trails its
acceptance on held-out prompts of the training templates (docs/smollm2.md, r25: greedy agreement 0.36-0.41
against 0.52), while the target's own first 28 layers, read out untrained, do as well on both. The templates
are too narrow; prompts the target writes from a few varied examples are broader than any list written here.

How: a numbered list "Messages people sent to an AI assistant:" with five examples drawn from SEEDS and from
the prompts accepted so far; the target continues the list with one more item (T = 0.9, top-p 0.95, plain
completion, no chat template), up to the line's end. Kept when 15-300 characters, one line, not a repeat
(case and spacing folded) and not in any benchmarks/prompts/unseen_chat*.json set. The result is written to
training/self_prompts.json (committed: the distillation's inputs stay reviewable); `prompts(which)` splits
it by chat_prompts' hash of each text, one in 20 held out.

    python training/self_instruct.py --n 1200 --minutes 10
"""
from __future__ import annotations

import argparse
import json
import pathlib
import random
import re
import sys
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # run as a script; imported, training/ is on the path already
    sys.path.insert(0, str(HERE))
import chat_prompts  # noqa: E402

OUT = HERE / "self_prompts.json"
UNSEEN = sorted((HERE.parent / "benchmarks" / "prompts").glob("unseen_chat*.json"))

# Written for this file, 2026-12-03, as examples of kinds of message; none is an unseen-set prompt.
SEEDS = [
    "How do I get red wine out of a white carpet?",
    "Explain how vaccines train the immune system.",
    "Write a four-line poem about a lighthouse keeper.",
    "What are some good habits for learning a new language as an adult?",
    "My laptop fan is very loud when I open a browser. What could be wrong?",
    "Can you suggest a simple vegetarian lunch I can prepare the night before?",
    "Write a Python script that renames every .txt file in a folder to lowercase.",
    "Why did the Roman Empire split into east and west?",
    "What is a good way to start running if I have never exercised?",
    "Help me write a message declining a job offer politely.",
    "What does compound interest mean? Give an example with numbers.",
    "Tell me a short story about a robot who learns to paint.",
    "How do I center a div horizontally and vertically in CSS?",
    "What are the pros and cons of working from home?",
    "If a train travels 180 km in 2 hours, how long does it take to travel 450 km?",
    "Give me tips for a first job interview at a bank.",
    "What is the difference between a virus and a bacterium?",
    "Suggest a name for a small bakery that sells mostly bread.",
    "How can I make my houseplants stop turning yellow?",
    "Write a SQL query that counts orders per customer.",
    "Explain what an API is to someone who does not program.",
    "What should I consider before adopting a cat?",
    "Rewrite this sentence to sound more formal: we gotta finish this by friday.",
    "Plan a relaxed one-week road trip along a coast.",
    "Why is the ocean salty but rivers are not?",
    "What are three arguments for and against school uniforms?",
    "How do I politely tell a coworker that they talk too loudly on calls?",
    "Explain recursion with a simple example.",
    "Write a product description for a reusable water bottle.",
    "What happens in the body when we sleep?",
    "Give me a weekly budget plan for a student living alone.",
    "What was the significance of the printing press?",
    "How do I fix 'permission denied' when running a shell script?",
    "Write a funny birthday message for a friend turning forty.",
    "What is the best way to memorise a speech?",
    "Describe the taste of a mango to someone who has never had one.",
    "Can you explain how a bill becomes a law?",
    "What are some easy ways to reduce plastic waste at home?",
    "Write a bash one-liner to find the ten largest files in a directory.",
    "Why do cats purr?",
]


def fold(text: str) -> str:
    """`text` with case and runs of white space folded: how prompts are compared for repeats."""
    return re.sub(r"\s+", " ", text.strip().lower())


def unseen_prompts() -> set[str]:
    return {fold(p) for path in UNSEEN for p in json.loads(path.read_text())["prompts"]}


def _clean(line: str) -> str | None:
    text = line.strip().strip('"').strip()
    if not 15 <= len(text) <= 300 or "\n" in text or text[0] in "-*#0123456789":
        return None
    return text


def generate(n: int, minutes: float, seed: int, batch: int = 32, max_new: int = 60) -> list[str]:
    """Up to `n` new prompts written by the target (see the module doc), in `minutes` at most."""
    sys.path.insert(0, str(HERE.parent / "src"))
    from exactspec.pairs.smollm2 import load_target

    target, tok = load_target()
    tok.padding_side = "left"
    rng = random.Random(seed)
    seen = unseen_prompts()
    taken = {fold(s) for s in SEEDS}
    kept: list[str] = []
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    t0, rounds = time.time(), 0
    while len(kept) < n and time.time() - t0 < minutes * 60:
        pool = SEEDS + kept
        heads = []
        for _ in range(batch):
            shots = rng.sample(pool, 5)
            heads.append("Messages people sent to an AI assistant:\n"
                         + "".join(f"{i + 1}. {s}\n" for i, s in enumerate(shots)) + "6.")
        enc = tok(heads, return_tensors="pt", padding=True, add_special_tokens=False)
        torch.manual_seed(seed * 1000003 + rounds)
        with torch.inference_mode():
            out = target.generate(**enc, max_new_tokens=max_new, do_sample=True, temperature=0.9, top_p=0.95,
                                  top_k=0, eos_token_id=newline + [tok.eos_token_id], pad_token_id=tok.pad_token_id)
        for row in out[:, enc["input_ids"].shape[1]:]:
            text = _clean(tok.decode(row, skip_special_tokens=True).split("\n")[0])
            if text and fold(text) not in taken and fold(text) not in seen:
                taken.add(fold(text))
                kept.append(text)
        rounds += 1
        print(f"self-instruct: round {rounds}, {len(kept)} prompts, {time.time() - t0:.0f}s", flush=True)
    return kept[:n]


def all_prompts() -> list[str]:
    return json.loads(OUT.read_text())["prompts"] if OUT.exists() else []


def prompts(which: str, seed: int | None = 0) -> list[str]:
    """The 'train' or 'heldout' self-instruct prompts, split and shuffled as training/chat_prompts.py's."""
    return chat_prompts.prompts(which, seed=seed, pool=all_prompts())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1200)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    kept = generate(args.n, args.minutes, args.seed)
    OUT.write_text(json.dumps({"about": "User messages written by SmolLM2-135M-Instruct itself from varied "
                               "examples (training/self_instruct.py); distillation prompts, never benchmark "
                               "prompts.", "command": "python training/self_instruct.py " + " ".join(sys.argv[1:]),
                               "prompts": kept}, indent=1) + "\n")
    print(f"self-instruct: wrote {len(kept)} prompts to {OUT}")


if __name__ == "__main__":
    main()
