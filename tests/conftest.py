"""Shared test set-up.

One torch thread: the tests use tiny models where threading buys nothing, and on a shared 2-core machine
(CI, or a developer's machine training the demo pair) OpenMP threads spinning against other processes can
slow a run a hundredfold.

No cost profile left behind: a profile is measured once and then prices every later ``gamma="auto"`` run on the
machine, and one measured beside the suite's own load (a CLI test's subprocess, two test workers busy) priced the
stdlib pair's plain transformers step at 21 ms where it takes 8.5, so that seeded runs of a benchmark after the
suite decided from it (2026-12-07). The profiles the session wrote into the cache are removed when it ends.
"""
import os
import time

import torch

torch.set_num_threads(1)


def _costs_dir():
    from exactspec.backends.cachedir import cache_root

    return cache_root() / "costs"


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controller (or a run without workers), once
        session.config._profiles_before = time.time()


def pytest_sessionfinish(session):
    start = getattr(session.config, "_profiles_before", None)
    if start is None:
        return
    folder = _costs_dir()
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            if path.stat().st_mtime >= start:
                os.unlink(path)
        except OSError:  # another process removed or replaced it
            pass
