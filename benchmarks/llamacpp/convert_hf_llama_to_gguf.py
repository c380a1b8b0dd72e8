#!/usr/bin/env python3
"""Kept for the groundwork scripts beside it: the converter now lives in the package (exactspec.pairs.gguf).

Usage: python convert_hf_llama_to_gguf.py HF_DIR OUT.gguf [--outtype f32|f16]
"""
from __future__ import annotations

from exactspec.pairs.gguf import convert_to_gguf as convert, main  # noqa: F401 - the groundwork imports `convert`

if __name__ == "__main__":
    raise SystemExit(main())
