"""The `exactspec` command. Thin: each subcommand module parses its arguments and calls the library.

Each subcommand lives in its own module exposing `register(subparsers)`, which adds a parser and sets
`func` to a callable taking the parsed namespace and returning an exit code.
"""
from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = ("explain", "speedup", "generate", "demo", "bench", "plan", "profile")


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:
        # Bad input is reported plainly, never as a traceback or a silent wrong answer.
        print(f"exactspec {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
