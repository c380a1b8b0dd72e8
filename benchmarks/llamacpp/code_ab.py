"""Two checkouts of exactspec, timed against each other on llama.cpp in one process: is the new code faster?

The old checkout's package is copied to a temporary directory as `exactspec_old` (its absolute imports renamed),
so both codes run in one process, each on its own load of the stdlib pair's GGUF files, interleaved prompt by
prompt: old and new take turns within a fraction of a second, which is what makes a difference of a few percent
measurable on this VM (worker processes taking turns measured 0.6–1.4× from round to round). Each code first
makes one untimed pass over the prompts (γ = auto measures or reads its stored profile there, and a generator's
γ = auto learns from run to run, as in `exactspec bench`); then every round times every system of both codes on
every prompt, end to end as the bench times them (prefill included). Report: per system, ms per token of each
code (medians) and the median over (round, prompt) of old seconds / new seconds (> 1: the new code is faster);
greedy outputs of the two codes compared per prompt. A line per round on stderr.

    .venv/bin/python benchmarks/llamacpp/code_ab.py --old OLD_CHECKOUT --prompts FILE
        [--num-prompts 6] [--repeats 3] [--systems ...] [--out R.json]

Systems: our target-alone loop, token γ = 4 greedy, token γ = auto greedy, token γ = auto at T = 1.
"""
from __future__ import annotations

import argparse
import atexit
import importlib
import json
import pathlib
import re
import shutil
import statistics
import sys
import tempfile
import time

SYSTEMS = ["loop", "token γ=4 greedy", "token γ=auto greedy", "token γ=auto T=1"]


def import_old(checkout: pathlib.Path):
    """The old checkout's `exactspec`, importable beside this one as `exactspec_old`."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="code-ab-"))
    atexit.register(shutil.rmtree, tmp, True)
    dst = tmp / "exactspec_old"
    shutil.copytree(checkout / "src" / "exactspec", dst, ignore=shutil.ignore_patterns("__pycache__"))
    # its imports, and its own module paths in strings ("exactspec.engine..."), not file names such as
    # "exactspec.json" (the GGUF cache's stamp, shared with the new code) nor words in prose
    mods = "|".join(sorted({q.stem for q in dst.iterdir() if q.suffix == ".py" or q.is_dir()}))
    imports = re.compile(r"\bexactspec(?=[.\s\"'])")
    paths = re.compile(rf"\bexactspec(?=\.(?:{mods})\b)")
    for f in dst.rglob("*.py"):
        lines = f.read_text().split("\n")
        f.write_text("\n".join(imports.sub("exactspec_old", line) if line.lstrip().startswith(("import ", "from "))
                               else paths.sub("exactspec_old", line) for line in lines))
    sys.path.insert(0, str(tmp))
    return importlib.import_module("exactspec_old")


class Code:
    """One code's pair, generator and systems."""

    def __init__(self, pkg, n: int):
        import torch

        self.torch, self.n = torch, n
        self.target, self.draft, self.tok = pkg.load_pair("stdlib", backend="llamacpp", threads=2)
        self.gen = pkg.SpeculativeGenerator(self.target, self.draft)
        self.loop = importlib.import_module(pkg.__name__ + ".engine.baseline").target_alone_loop
        self.g = torch.Generator().manual_seed(0)

    def run(self, system: str, ids):
        torch = self.torch
        t0 = time.perf_counter()
        if system == "loop":
            out = self.loop(self.target, ids, torch.ones_like(ids), max_new_tokens=self.n, temperature=0.0, seed=0)[0]
        else:
            kw = dict(gamma=4 if "γ=4" in system else "auto", eos_token_id=[])
            if "T=1" in system:
                kw.update(do_sample=True, temperature=1.0, generator=self.g)
            else:
                kw.update(do_sample=False)
            out = self.gen.generate(ids, max_new_tokens=self.n, **kw).sequences[0, ids.shape[1]:]
        return time.perf_counter() - t0, out.tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the old checkout (a directory with src/exactspec)")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--num-prompts", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"a comma-separated subset of: {', '.join(SYSTEMS)}")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    systems = args.systems.split(",")
    if set(systems) - set(SYSTEMS):
        raise SystemExit(f"--systems: a comma-separated subset of {', '.join(SYSTEMS)}")
    import torch

    import exactspec

    torch.set_num_threads(2)
    old_pkg = import_old(pathlib.Path(args.old).resolve())
    prompts = json.loads(pathlib.Path(args.prompts).read_text())["prompts"][: args.num_prompts]
    codes = {"old": Code(old_pkg, args.max_new_tokens), "new": Code(exactspec, args.max_new_tokens)}
    inputs = [codes["new"].tok(p, return_tensors="pt").input_ids for p in prompts]
    for c in codes.values():  # untimed: profiles, warm caches, gamma="auto"'s learning
        for ids in inputs:
            for s in systems:
                c.run(s, ids)
    times = {c: {s: [] for s in systems} for c in codes}
    unlike = {s: 0 for s in systems if "greedy" in s or s == "loop"}
    for rep in range(args.repeats):
        for i, ids in enumerate(inputs):
            for s in systems:
                outs = {}
                for c in (["old", "new"] if (rep + i) % 2 == 0 else ["new", "old"]):  # each goes first half the time
                    dt, outs[c] = codes[c].run(s, ids)
                    times[c][s].append(dt)
                if s in unlike:
                    unlike[s] += outs["old"] != outs["new"]
        k = len(inputs)
        print(f"round {rep + 1}/{args.repeats}: " + ", ".join(
            f"{s} old/new {statistics.median([o / n for o, n in zip(times['old'][s][-k:], times['new'][s][-k:])]):.3f}"
            for s in systems), file=sys.stderr, flush=True)
    n = args.max_new_tokens
    result = {"prompts": args.prompts, "n_prompts": len(prompts), "repeats": args.repeats,
              "old": str(pathlib.Path(args.old).resolve()), "max_new_tokens": n,
              "ms_per_token": {c: {s: round(1e3 * statistics.median(v) / n, 4) for s, v in times[c].items()}
                               for c in codes},
              "old_over_new": {s: round(statistics.median([o / x for o, x in zip(times["old"][s], times["new"][s])]), 3)
                               for s in systems},
              "greedy_outputs_unlike": unlike}
    print(json.dumps(result, indent=1))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
