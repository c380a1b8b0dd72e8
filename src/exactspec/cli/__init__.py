"""The `exactspec` command. Thin: each subcommand module parses its arguments and calls the library.

Each subcommand lives in its own module exposing `register(subparsers)`, which adds a parser and sets
`func` to a callable taking the parsed namespace and returning an exit code.

Errors: every expected error (bad option values, conflicting options, missing files, bad input found by
the library's validation layer, :mod:`exactspec.verification.checks`) is ONE line on stderr,
``exactspec <cmd>: error: ...``, and exit status 2. Anything else is a bug and keeps its traceback.
Option values are checked by the argparse ``type=`` checkers below, at parse time, before any model loads.
"""
from __future__ import annotations

import argparse
import importlib
import math
import re
import sys

SUBCOMMANDS = ("explain", "speedup", "generate", "demo", "bench", "plan", "profile", "audit", "cache")


def parse_gamma(value: str):
    """`--gamma` of generate and bench: a draft length >= 1 or "auto"."""
    if value == "auto":
        return "auto"
    try:
        gamma = int(value)
    except ValueError:
        raise ValueError(f"--gamma must be an integer >= 1 or 'auto', got {value!r}") from None
    if gamma < 1:
        raise ValueError(f"--gamma must be an integer >= 1 or 'auto', got {gamma}")
    return gamma


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (it would print the usage block first)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# ------------------------------------------------------------------------- argparse type= checkers
def _number(text: str, kind=float):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                         f"got {text!r}") from None


def real(lo: float | None = None, hi: float | None = None):
    """`type=` for a finite number in [lo, hi] (NaN and inf rejected)."""
    def parse(text: str) -> float:
        v = _number(text)
        if not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
            rng = f" in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else (f" >= {lo:g}" if lo is not None else "")
            raise argparse.ArgumentTypeError(f"must be a finite number{rng}, got {text!r}")
        return v
    return parse


def integer(lo: int | None = None, hi: int | None = None):
    """`type=` for an integer in [lo, hi]."""
    def parse(text: str) -> int:
        v = _number(text, int)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            rng = f" in [{lo}, {hi}]" if lo is not None and hi is not None else f" >= {lo}"
            raise argparse.ArgumentTypeError(f"must be an integer{rng}, got {v}")
        return v
    return parse


SEED = integer(0, 2**63 - 1)  # a torch.Generator seed; commands add small offsets to it per prompt


def device(text: str) -> str:
    """`type=` for --device: a device this torch build has (imports torch)."""
    from exactspec.verification.checks import check_device

    try:
        check_device("device", text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("device: ")) from None
    return text


def pair(text: str) -> str:
    """`type=` for --pair: a shipped pair's canonical name ("demo" is "stdlib")."""
    from exactspec.pairs.load import pair_name

    try:
        return pair_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


DRAFT_DTYPES = ("float32", "float16", "bfloat16")
DRAFT_DTYPE_HELP = ("run the draft in this dtype: float32, float16 or bfloat16 (default: as loaded, float16 for "
                    "the stdlib pair's draft). Exactness does not depend on it; on a CPU where reading the "
                    "draft's weights is the cost, a half-precision draft is a faster one")


def cast_draft(draft, dtype: str | None, target=None):
    """--draft-dtype: `draft` in `dtype` (:func:`exactspec.pairs.load.draft_in_dtype`), or as it is for None; a
    ValueError naming --draft-dtype when there is no draft model to cast."""
    if dtype is None:
        return draft
    if draft is None:
        raise ValueError("--draft-dtype needs a draft model (not --prompt-lookup)")
    if getattr(draft, "backend", None) == "llamacpp":
        raise ValueError("--draft-dtype: a llama.cpp draft computes in its GGUF file's own type")
    from exactspec.pairs.load import draft_in_dtype

    return draft_in_dtype(draft, dtype, target)


def check_out_file(option: str, path: str) -> None:
    """An output file whose directory exists (checked before any work is spent)."""
    import os

    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"{option}: {path!r} is a directory, expected a file name")
    if not os.path.isdir(parent):
        raise ValueError(f"{option}: directory {parent!r} does not exist (for {path!r})")


def check_in_file(option: str, path: str) -> str:
    """An input file that exists and is not empty; returns its text."""
    import os

    if not os.path.isfile(path):
        raise ValueError(f"{option}: no such file {path!r}")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if not text.strip():
        raise ValueError(f"{option}: file {path!r} is empty")
    return text


def parse_tree(value: str | None):
    """`--tree` of generate and bench: branching factors "3,2,1,1", a node budget "N", or "auto"."""
    if value is None or value == "auto":
        return value
    try:
        parts = [int(v) for v in value.split(",")]
    except ValueError:
        raise ValueError(f"--tree must be branching factors like 3,2,1,1, a node budget N or 'auto', "
                         f"got {value!r}") from None
    if any(v < 1 for v in parts):
        raise ValueError(f"--tree values must be >= 1, got {value!r}")
    return parts[0] if len(parts) == 1 and "," not in value else tuple(parts)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="exactspec",
        description="Exact speculative decoding, with its mathematics made executable.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"exactspec.cli.{name}")
        except ModuleNotFoundError as exc:  # subcommand not built yet
            if exc.name != f"exactspec.cli.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv`; the exit status. Ctrl-C never shows a traceback: the long commands keep and
    say what they finished (exactspec.cli.progress), anything else says it was interrupted; status 130."""
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help (0) or a one-line usage error (2): an exit status, like the rest
            return exc.code if isinstance(exc.code, int) else 2
    except KeyboardInterrupt:
        return 130
    if not getattr(args, "func", None):
        print(f"exactspec: error: a command is required, one of {', '.join(SUBCOMMANDS)} "
              "(see exactspec --help)", file=sys.stderr)
        return 2
    from exactspec.backends.optional import BackendMissing

    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, BackendMissing) as exc:
        # Bad input (ValueError, and checks.ArgumentTypeError which is one) and missing files are
        # reported on one line, never as a traceback or a silent wrong answer. Other exceptions are bugs.
        print(f"exactspec {args.command}: error: {_cli_words(str(exc), args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the command had anything to keep (loading models), or a second Ctrl-C
        print(f"exactspec {args.command}: interrupted (nothing finished to keep)",
              file=sys.stderr, flush=True)
        return 130


def _cli_words(message: str, args) -> str:
    """One line, with the library's argument names (max_new_tokens) spelled as this command's options
    (--max-new-tokens) where the command has such an option."""
    message = " ".join(message.split())
    for dest in vars(args):
        if "_" in dest:
            message = re.sub(rf"(?<![-\w]){dest}(?!\w)", "--" + dest.replace("_", "-"), message)
    return message


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
