"""Where exactspec keeps what it made from a model once: converted weights, measured cost profiles."""
from __future__ import annotations

import os
import pathlib

__all__ = ["cache_root"]


def cache_root() -> pathlib.Path:
    """`$EXACTSPEC_CACHE`, or `~/.cache/exactspec` when it is unset or empty."""
    return pathlib.Path(os.environ.get("EXACTSPEC_CACHE") or pathlib.Path.home() / ".cache" / "exactspec")
