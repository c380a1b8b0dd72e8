"""Cost profiles kept on disk: what a seeded ``gamma="auto"`` run prices its decisions with.

Why: ``gamma="auto"`` decides how far to draft from a :class:`~exactspec.speed.costmodel.CostModel`. Measured
afresh in each process, its timings differ from one process to the next, so do the decisions, and so does
the order in which a seeded run draws its randomness: the same seed gave other tokens in every new process.
A seeded run instead prices with a profile measured once per (model shapes, dtypes, device, machine, build,
threads, batch size) and stored as JSON under ``cache_root()/costs/``: every later process reads the same
numbers, and the first one decides from what it wrote (read back), so it agrees with them too.

A profile's prices depend on the models' shapes and dtypes, not their weights: a forward costs the same whatever
its weights hold. A loop profile also stores the pair's acceptance, which the weights decide: its name carries a
digest of them too (:func:`weights_digest`). A profile does depend on exactspec's code (its version and a digest of
its sources), whose own loop it times. Deleting the file (``exactspec cache --clear costs``) measures a new one,
whose decisions, and so whose seeded tokens, may differ.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import warnings
import weakref
from functools import lru_cache

from exactspec.backends.cachedir import cache_root

__all__ = ["stored_cost_model", "profile_key", "weights_digest"]

# Settings that change how the engine runs a forward (docs/generation.md), and so what it costs.
_ENV = ("EXACTSPEC_LEAN_TARGET", "EXACTSPEC_DRAFT_UPCAST")
_IN_PROCESS: dict[str, object] = {}
# A model's config as the key reads it, once per model object: every seeded gamma="auto" run names its profile,
# and transformers' to_diff_dict took about a third of the ~1.2 ms that cost a run (a llama.cpp run: ~0.8%).
# describe() (parameter shapes and dtypes, or the file) is read each time: model.half() changes it in place. A
# config edited in place after a model's first seeded run keeps that run's profile (exactspec cache --clear costs).
_CONFIGS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# A torch model's weights digest, once per model object and state of its parameters (weights_digest).
_WEIGHTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
WEIGHT_SAMPLES = 64  # values read from each tensor, evenly strided: enough to tell a fine-tune or a noisy copy


def _config(model) -> dict:
    try:
        return dict(_CONFIGS[model])
    except (KeyError, TypeError):
        cfg = model.config
        diff = cfg.to_diff_dict() if hasattr(cfg, "to_diff_dict") else {}
        try:
            _CONFIGS[model] = diff
        except TypeError:  # (a model that takes no weak reference is read each time)
            pass
        return dict(diff)


def _shape(model) -> dict:
    from exactspec.backends.seam import describe

    return {**describe(model), "config": _config(model)}


@lru_cache(maxsize=1)
def _version() -> str:
    """exactspec's version and a digest of its sources, once per process (a few ms). The loop-priced profiles
    time the engine's own Python, so a profile measured by other code prices other steps: an editable install
    keeps its version number while its code changes (a profile measured before a change to the plain step
    priced it 30% too dear, and seeded greedy runs drafted at a loss, 2026-12-04)."""
    import pathlib
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("exactspec")
    except PackageNotFoundError:  # run from a source tree
        v = "source"
    return f"{v}+{source_digest(pathlib.Path(__file__).resolve().parent.parent)}"


def source_digest(root) -> str:
    """12 hex digits naming the ``*.py`` files under `root` (a pathlib.Path): their paths and contents."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


@lru_cache(maxsize=1)
def _cpu() -> str:
    """The processor's model and instruction sets: a VM moved to another CPU (an AVX2 one, then an AVX-512 one)
    keeps its node name and `platform.processor()` (empty on Linux), but not its costs: llama.cpp's k-token
    forwards differ a lot between the two (../shared/design/llamacpp-costs.md)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            info = dict(line.split(":", 1) for line in fh.read().split("\n\n")[0].splitlines() if ":" in line)
    except OSError:
        return platform.processor()
    info = {k.strip(): v.strip() for k, v in info.items()}
    flags = hashlib.sha256(" ".join(sorted(info.get("flags", "").split())).encode()).hexdigest()[:12]
    return f"{info.get('model name', platform.processor())} {flags}"


def profile_key(target, draft, batch_size: int) -> str:
    """A hex digest naming the profile of (target, draft) at `batch_size` on this machine and build."""
    import torch

    blob = {"target": _shape(target), "draft": _shape(draft), "batch_size": batch_size,
            "torch": torch.__version__, "threads": torch.get_num_threads(), "exactspec": _version(),
            "python": sys.version.split()[0], "machine": platform.machine(), "cpu": _cpu(),
            "node": platform.node(), "env": {k: os.environ.get(k) for k in _ENV}}
    blob["target"]["config"].pop("_name_or_path", None)
    blob["draft"]["config"].pop("_name_or_path", None)
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:24]


def weights_digest(*models) -> str:
    """12 hex digits naming the models' weights, for what depends on them and not only on their shapes: the pair's
    acceptance, which a loop profile stores beside its prices (two drafts of one config, a fine-tune and its base,
    share a profile_key but not their rates). A torch model: WEIGHT_SAMPLES evenly strided values of each
    parameter, read once per model object and again when an in-place write bumps a parameter's version (``copy_``,
    ``load_state_dict``; not a write through ``.data`` nor a parameter replaced by a new one, which keep the
    first digest); a llama.cpp model: its file, as `describe` names it. 6 ms for the stdlib pair, 40 for SmolLM2
    on transformers the first time, 0.05 ms after."""
    from exactspec.backends.seam import describe, is_backend_model

    digest = hashlib.sha256()
    for model in models:
        if is_backend_model(model) or not hasattr(model, "named_parameters"):
            digest.update(json.dumps(describe(model), sort_keys=True, default=str).encode())
            continue
        try:
            seen = _WEIGHTS.get(model)
        except TypeError:  # (a model that takes no weak reference is read each time)
            seen = None
        if seen is None or tuple(p._version for _, p in seen[0]) != seen[1]:
            params = list(model.named_parameters())
            seen = (params, tuple(p._version for _, p in params), _sample_digest(params))
            try:
                _WEIGHTS[model] = seen
            except TypeError:
                pass
        digest.update(seen[2].encode())
    return digest.hexdigest()[:12]


def _sample_digest(params) -> str:
    import torch

    digest = hashlib.sha256()
    with torch.no_grad():
        for name, p in params:
            flat = p.detach().reshape(-1)
            sample = flat[::max(1, flat.numel() // WEIGHT_SAMPLES)][:WEIGHT_SAMPLES]
            digest.update(name.encode() + sample.to("cpu", torch.float64).numpy().tobytes())
    return digest.hexdigest()


def stored_cost_model(target, draft, batch_size: int = 1, loop: str | None = None, measure=None):
    """The cost profile of (target, draft) at `batch_size`: read from ``cache_root()/costs/<key>.json``, else
    measured (:meth:`CostModel.measure`), written there and read back. A profile that cannot be read is
    measured anew and replaced (said on stderr); a cache that cannot be written keeps the measured profile for
    this process only, with a warning that seeded runs then reproduce within this process only.

    `loop` ("greedy" or "sampled") with `measure` (a callable returning a CostModel): the profile as the
    engine's loop runs in that sampling mode (:func:`exactspec.engine.loopcosts.loop_priced`), stored apart as
    ``<key>.loop-<mode>-<weights>.json``: it also holds the pair's acceptance (``acceptance``), which the
    weights decide (:func:`weights_digest`). The bare forwards leave out what a step costs in Python around them,
    0.7-1.5 ms a step on llama.cpp beside a 1.5-4 ms forward (docs/llamacpp.md, r6), so a seeded run priced by
    them drafted where drafting lost."""
    from exactspec.speed.costmodel import CostModel

    if loop is None:
        return _stored(profile_key(target, draft, batch_size),
                       lambda: CostModel.measure(target, draft, batch_size=batch_size))
    if loop not in ("greedy", "sampled"):
        raise ValueError(f"loop must be None, 'greedy' or 'sampled', got {loop!r}")
    if not callable(measure):
        raise ValueError(f"measure: a callable measuring the {loop} loop's profile is needed, got {measure!r}")
    return _stored(f"{profile_key(target, draft, batch_size)}.loop-{loop}-{weights_digest(target, draft)}", measure)


def _stored(key: str, measure):
    """What `measure()` returns, stored once as ``cache_root()/costs/<key>.json`` and read back from there."""
    from exactspec.speed.costmodel import CostModel

    if key in _IN_PROCESS:
        return _IN_PROCESS[key]
    path = cache_root() / "costs" / f"{key}.json"
    cm = None
    if path.exists():
        try:
            cm = CostModel.load(path)
        except ValueError as exc:
            print(f"exactspec: the cost profile {path} is unreadable ({exc}); measuring it again",
                  file=sys.stderr)
            path.unlink(missing_ok=True)
    if cm is None:
        measured = measure()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}")
            measured.save(tmp)
            try:
                os.link(tmp, path)  # exclusive: if another process wrote it first, everyone reads its numbers
            except FileExistsError:
                pass
            finally:
                tmp.unlink(missing_ok=True)
            cm = CostModel.load(path)
        except OSError as exc:
            warnings.warn(f"cannot store the cost profile in {path.parent} ({exc}); a seeded gamma='auto' run "
                          "reproduces within this process only (set EXACTSPEC_CACHE to a writable directory)",
                          stacklevel=3)
            cm = CostModel.from_dict(json.loads(json.dumps(measured.to_dict())))
    _IN_PROCESS[key] = cm
    return cm
