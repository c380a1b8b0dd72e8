#!/usr/bin/env python3
"""Tests for llamacpp_model.LlamaCppModel (run: python test_llamacpp_model.py, or pytest).

GGUF: $LLAMACPP_TEST_GGUF or gguf/demo_target_f32.gguf (written by convert_hf_llama_to_gguf.py)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from llamacpp_model import LlamaCppModel  # noqa: E402

GGUF = os.environ.get("LLAMACPP_TEST_GGUF", str(HERE / "gguf" / "demo_target_f32.gguf"))
TOL = 2e-3 if "f32" in GGUF else 1e-2
rng = np.random.default_rng(0)


def ids(n):
    return rng.integers(1, 4096, size=n).tolist()


def single(tokens_chunks, **kw):
    """Fresh 1-sequence model; decode chunks one call each; return list of logits per chunk."""
    with LlamaCppModel(GGUF, n_ctx=512, n_seq=1, threads=2, **kw) as m:
        return [m.forward([c], [m.length(0)], [0]) for c in tokens_chunks]


def test_multirow_ragged():
    prefixes = [ids(20), ids(7), ids(13)]
    news = [ids(5), ids(1), ids(3)]
    with LlamaCppModel(GGUF, n_ctx=1536, n_seq=3, threads=2) as m:
        pre = m.forward(prefixes, [0, 0, 0], [0, 1, 2], split=True)
        # rows in a different order than seq ids, ragged
        out = m.forward([news[2], news[0], news[1]], [13, 20, 7], [2, 0, 1], split=True)
        last = m.forward([news[0][:1], news[2][:1]], [25, 16], [0, 2], last_only=True)
        assert last.shape == (2, m.vocab_size)
    worst = 0.0
    for r, (p, n) in enumerate(zip(prefixes, news)):
        ref_p, ref_n = single([p, n])
        got_n = out[[2, 0, 1].index(r)]
        worst = max(worst, np.abs(pre[r] - ref_p).max(), np.abs(got_n - ref_n).max())
        assert (got_n.argmax(-1) == ref_n.argmax(-1)).all()
    assert worst < TOL, worst
    print(f"multirow ragged B=3 vs single-row: max abs diff {worst:.2e}")


def test_rollback():
    p, a, b = ids(30), ids(6), ids(4)
    with LlamaCppModel(GGUF, n_ctx=512, n_seq=1, threads=2) as m:
        m.forward([p + a], [0], [0])
        m.keep(0, 30)
        got = m.forward([b], [30], [0])
        m.keep(0, 33)               # partial rollback inside b
        got2 = m.forward([a[:2]], [33], [0])
    ref = single([p, b])[1]
    ref2 = single([p, b[:3], a[:2]])[2]
    d = max(np.abs(got - ref).max(), np.abs(got2 - ref2).max())
    assert d < TOL, d
    print(f"rollback + re-decode vs fresh: max abs diff {d:.2e}")


def test_tree_kv_unified():
    P = ids(25)
    a, b, c, d, e, f = ids(6)
    n = len(P)
    with LlamaCppModel(GGUF, n_ctx=512, n_seq=3, threads=2, kv_unified=True) as m:
        m.forward([P], [0], [0])
        m.copy_row(0, 1)
        m.copy_row(0, 2)
        toks = [a, b, c, d, e, f]
        pos = [n, n + 1, n + 2, n + 1, n + 1, n + 2]
        seqs = [[0, 1, 2], [0], [0], [1], [2], [2]]
        out = m.decode(toks, pos, seqs)
        # accept branch 2 (a e f): make it row 0, drop the others, continue
        m.copy_row(2, 0)
        m.keep(1, 0); m.keep(2, 0)
        nxt = m.forward([[b]], [n + 3], [0])
    r0 = single([P, [a, b, c]])[1]
    r1 = single([P, [a, d]])[1]
    r2 = single([P, [a, e, f], [b]])
    worst = max(np.abs(out[0:3] - r0).max(), np.abs(out[3] - r1[1]).max(),
                np.abs(out[4:6] - r2[1][1:]).max(), np.abs(out[0] - r2[1][0]).max(),
                np.abs(nxt - r2[2]).max())
    assert worst < TOL, worst
    print(f"tree (token with 3 seq ids, kv_unified) vs chains: max abs diff {worst:.2e}")


def test_tree_flat_single_seq_is_rejected_without_unified():
    with LlamaCppModel(GGUF, n_ctx=512, n_seq=2, threads=2, kv_unified=False) as m:
        m.forward([[1, 2]], [0], [0])
        try:
            m.decode([3], [2], [[0, 1]])
        except ValueError:
            pass
        else:
            raise AssertionError("multi-seq token accepted without kv_unified")


def test_guards():
    with LlamaCppModel(GGUF, n_ctx=512, n_seq=2, threads=2, n_batch=16) as m:
        for bad in (lambda: m.forward([ids(17)], [0], [0]),          # > n_batch
                    lambda: m.forward([ids(2)], [0], [2]),           # seq id >= n_seq
                    lambda: m.forward([ids(2)], [0], [-1]),
                    lambda: m.forward([ids(2)], [5], [0]),           # position gap
                    lambda: m.forward([[4096]], [0], [0]),           # token id out of range
                    lambda: m.forward([ids(2), ids(2)], [0, 0], [1, 1]),
                    lambda: m.decode(ids(2), [0, 1], [[0], [0, 1, 1]])):
            try:
                bad()
            except ValueError:
                continue
            raise AssertionError("guard did not fire")
        m.forward([ids(16)], [0], [0])                              # exactly n_batch is fine
    print("guards: ValueError for n>n_batch, bad seq id, position gap, bad token id")


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
    print("all tests passed on", GGUF)
