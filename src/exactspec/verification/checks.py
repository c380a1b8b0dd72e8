"""The validation layer: every public entry point checks its arguments here, up front.

Small reusable checkers for scalar arguments, generators, seeds, devices and tensors (:func:`check_int`,
:func:`check_real`, :func:`check_prob`, :func:`check_bool`, :func:`check_choice`, :func:`check_generator`,
:func:`check_seed`, :func:`check_device`, :func:`check_tensor`, ...). The checks shared by the
verification rules (shapes, token ranges, rows that are probability distributions) build on them in
:mod:`exactspec.verification.rulechecks`.

Every failure names the argument and the bad value. A wrong *type* raises :class:`ArgumentTypeError`, a
``TypeError`` that is also a ``ValueError`` (so ``except ValueError`` written against earlier versions,
and the CLI's one-line error handler, still catch it); a wrong *value* raises ``ValueError``. Nothing is
coerced: ``True`` is not the number 1, ``"0.5"`` is not 0.5, and NaN / inf are rejected unless allowed.
"""
from __future__ import annotations

import math
import numbers

# torch is imported inside the functions that need it: `exactspec speedup` and the arithmetic modules
# validate their arguments here without paying for importing torch.


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type (a TypeError, and a ValueError for backward compatibility)."""


def _show(v) -> str:
    s = repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and not _is_np_bool(v)


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and not _is_np_bool(v)


def _is_np_bool(v) -> bool:
    return type(v).__module__ == "numpy" and type(v).__name__ in ("bool_", "bool")


def _range_text(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f" in [{lo}, {hi}]"
    return f" >= {lo}" if lo is not None else (f" <= {hi}" if hi is not None else "")


def check_int(name: str, v, *, min: int | None = None, max: int | None = None) -> int:
    """An integer (Python or numpy, never bool or float) in [min, max]; returned as a Python int."""
    if not _is_int(v):
        raise ArgumentTypeError(f"{name} must be an integer{_range_text(min, max)}, got {_show(v)}")
    v = int(v)
    if (min is not None and v < min) or (max is not None and v > max):
        raise ValueError(f"{name} must be an integer{_range_text(min, max)}, got {v}")
    return v


def check_real(name: str, v, *, min: float | None = None, max: float | None = None,
               allow_inf: bool = False) -> float:
    """A real number (int or float, Python or numpy; never bool or str), not NaN, finite unless
    ``allow_inf``, in [min, max]; returned as a Python float."""
    if not _is_real(v):
        raise ArgumentTypeError(f"{name} must be a number{_range_text(min, max)}, got {_show(v)}")
    f = float(v)
    if math.isnan(f) or (math.isinf(f) and not allow_inf):
        raise ValueError(f"{name} must be a finite number{_range_text(min, max)}, got {_show(v)}")
    if (min is not None and f < min) or (max is not None and f > max):
        raise ValueError(f"{name} must be a number{_range_text(min, max)}, got {_show(v)}")
    return f


def check_prob(name: str, v) -> float:
    """A probability: a real number in [0, 1]."""
    return check_real(name, v, min=0.0, max=1.0)


def check_bool(name: str, v) -> bool:
    """A real bool (or numpy bool): ``"False"``, 0 and None are not accepted (``bool("False")`` is True)."""
    if not (isinstance(v, bool) or _is_np_bool(v)):
        raise ArgumentTypeError(f"{name} must be True or False, got {_show(v)}")
    return bool(v)


def check_choice(name: str, v, choices) -> str:
    if not isinstance(v, str) or v not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {_show(v)}")
    return v


def check_generator(name: str, g, device=None):
    """None or a ``torch.Generator`` (on ``device``'s type, when given)."""
    import torch
    if g is None:
        return None
    if not isinstance(g, torch.Generator):
        raise ArgumentTypeError(f"{name} must be a torch.Generator or None, got {_show(g)}")
    if device is not None and torch.device(g.device).type != torch.device(device).type:
        raise ValueError(f"{name} is on {g.device} but the tensors are on {device}")
    return g


SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # what torch.Generator.manual_seed accepts


def check_seed(name: str, seed):
    """None or an integer that ``torch.Generator.manual_seed`` accepts, [-2**63, 2**64 - 1]."""
    import torch
    if seed is None:
        return None
    if not _is_int(seed):
        raise ArgumentTypeError(f"{name} must be an integer or None, got {_show(seed)}")
    seed = int(seed)
    if not SEED_MIN <= seed <= SEED_MAX:
        raise ValueError(f"{name} must lie in [-2**63, 2**64 - 1] (a torch.Generator seed), got {seed}")
    return seed


def check_device(name: str, device) -> torch.device:
    """A torch device (or its name) that exists in this build: 'cuda' on a CPU-only torch is an error."""
    import torch
    if not isinstance(device, (str, torch.device)):
        raise ArgumentTypeError(f"{name} must be a device name such as 'cpu' or 'cuda:0', got {_show(device)}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"{name}: {device!r} is not a torch device ({exc})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}: {device!r} is not available: this torch build has no usable CUDA "
                             f"(torch {torch.__version__}); use 'cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{name}: {device!r} is not available: only {torch.cuda.device_count()} CUDA "
                             "device(s) exist")
    elif dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"{name}: {device!r} is not available: no MPS in this build; use 'cpu'")
    elif dev.type not in ("cpu", "cuda", "mps", "meta", "xpu"):
        raise ValueError(f"{name}: unsupported device {device!r}")
    return dev


def check_float_dtype(name: str, dtype):
    """None or a floating torch.dtype."""
    import torch
    if dtype is None:
        return None
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ArgumentTypeError(f"{name} must be a floating torch.dtype (e.g. torch.float32) or None, "
                                f"got {_show(dtype)}")
    return dtype


def check_tensor(name: str, x, *, kind: str | None = None, dims=None, min_last: int = 0) -> torch.Tensor:
    """``x`` is a torch.Tensor; ``kind`` "float" (floating dtype) or "int" (integer dtype, not bool);
    ``dims`` an int or a tuple of allowed numbers of dimensions (a shape text is printed in errors);
    ``min_last`` the smallest size of the last dimension."""
    import torch
    if not isinstance(x, torch.Tensor):
        raise ArgumentTypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}: {_show(x)}")
    if kind == "float" and not x.is_floating_point():
        raise ArgumentTypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if kind == "int" and (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool):
        raise ArgumentTypeError(f"{name} must be an integer tensor, got dtype {x.dtype}")
    if dims is not None:
        allowed = (dims,) if isinstance(dims, int) else tuple(dims)
        if x.dim() not in allowed:
            want = " or ".join(str(d) for d in allowed)
            raise ValueError(f"{name} must have {want} dimensions, got shape {tuple(x.shape)}")
    if min_last and (x.dim() == 0 or x.shape[-1] < min_last):
        raise ValueError(f"{name} must have a last dimension of size >= {min_last}, got shape {tuple(x.shape)}")
    return x


def check_token_ids(name: str, ids, vocab_size: int, *, allow_empty: bool = True) -> list[int]:
    """An int, or a list / tuple / 1-d integer tensor of ints, each in [0, vocab_size); returned as a list."""
    import torch
    if isinstance(ids, torch.Tensor):
        if ids.dim() > 1 or ids.is_floating_point() or ids.dtype == torch.bool:
            raise ArgumentTypeError(f"{name} must be an int or a 1-d integer tensor / list of ints, got "
                                    f"a {ids.dtype} tensor of shape {tuple(ids.shape)}")
        vals = [int(v) for v in ids.tolist()] if ids.dim() else [int(ids)]
    elif _is_int(ids):
        vals = [int(ids)]
    elif isinstance(ids, (list, tuple)):
        if not all(_is_int(v) for v in ids):
            raise ArgumentTypeError(f"{name} must be an int or a list of ints, got {_show(ids)}")
        vals = [int(v) for v in ids]
    else:
        raise ArgumentTypeError(f"{name} must be an int or a list of ints, got {_show(ids)}")
    if not allow_empty and not vals:
        raise ValueError(f"{name} must not be empty")
    bad = [v for v in vals if not 0 <= v < vocab_size]
    if bad:
        raise ValueError(f"{name}: token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
    return vals


def flatten(x) -> list:
    """The leaves of nested lists / tuples (a non-list is its own single leaf)."""
    flat, stack = [], [x]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        else:
            flat.append(v)
    return flat


def read_json_file(option: str, path: str):
    """The JSON in the file at ``path``; a missing, unreadable or malformed file is a ValueError naming ``option``."""
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise ValueError(f"cannot read {option} {path!r}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{option} {path!r} is not JSON: {exc}") from None
