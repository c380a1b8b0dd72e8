"""Optional backends: whether their package is installed, and the one error that says how to install it.
(Light on purpose: the command line imports it before knowing whether any model will run.)"""
from __future__ import annotations

import importlib.util

__all__ = ["BackendMissing", "llamacpp_available", "INSTALL_HINT", "LLAMA_CPP_VERSION"]

LLAMA_CPP_VERSION = "0.3.36"
INSTALL_HINT = "pip install 'exactspec[llamacpp]' (compiles llama-cpp-python once, about 4-7 minutes on 2 cores)"


class BackendMissing(ModuleNotFoundError):
    """A backend's package is not installed (the message says how to install it)."""


def llamacpp_available() -> bool:
    """Whether llama-cpp-python can be imported here."""
    return importlib.util.find_spec("llama_cpp") is not None
