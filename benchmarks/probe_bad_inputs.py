"""Probe the public API and the CLI with bad and edge inputs; classify what each one does.

    PYTHONPATH=src python benchmarks/probe_bad_inputs.py [--verbose] [--only GROUP]

Every case states what a careful user should get:

- ``err(names)``: a ValueError / TypeError whose message names the argument (one of ``names``); on the CLI
  exit status 2 and ONE stderr line ``exactspec <cmd>: error: ...`` naming it;
- ``ok(check)``: a valid (edge) input: no error, and ``check(result)`` holds when given;
- ``either(names, check)``: a clear error or a valid result are both acceptable.

and is classified as one of

- ``clear``: the expected clear error;
- ``valid``: the valid result;
- ``silent``: accepted although it should not be, or a wrong result for a valid input;
- ``unhelpful``: another exception type, a message that does not name the argument, a CLI traceback or
  multi-line error, or a valid input rejected.

The goal (issue 14): 0 silent, <= 5 unhelpful. Runs in ~1 min on one core (no downloads; a tiny random
Llama and the shipped demo pair). Works against older versions of the package too, so before/after
counts can be compared.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections import Counter

import numpy as np
import torch

NAN, INF = float("nan"), float("inf")


# ------------------------------------------------------------------------------------------ machinery
class Exp:
    def __init__(self, kind, names=(), check=None, timeout=None):
        self.kind, self.names, self.check, self.timeout = kind, tuple(names), check, timeout


def err(*names):
    return Exp("err", names)


def ok(check=None, timeout=None):
    return Exp("ok", (), check, timeout)


def either(*names, check=None):
    return Exp("either", names, check)


CASES: list[tuple[str, str, object, Exp]] = []


def case(group, desc, fn, exp):
    CASES.append((group, desc, fn, exp))


def _names_in(msg, names):
    return not names or any(n.lower() in msg.lower() for n in names)


class CaseTimeout(Exception):
    """A case ran past its time limit: minutes of work spent instead of an up-front answer."""


def _alarm(signum, frame):
    raise CaseTimeout("still running after its time limit")


CASE_TIMEOUT_S = 20


def classify(fn, exp) -> tuple[str, str]:
    import signal

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(exp.timeout or CASE_TIMEOUT_S)
    try:
        return _classify(fn, exp)
    except CaseTimeout as exc:
        return "unhelpful", f"timeout: {exc}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _classify(fn, exp) -> tuple[str, str]:
    try:
        res = fn()
    except CaseTimeout:
        raise
    except (ValueError, TypeError) as exc:
        msg = f"{type(exc).__name__}: {exc}"
        if exp.kind == "ok":
            return "unhelpful", "valid input rejected: " + msg
        return ("clear", msg) if _names_in(str(exc), exp.names) else ("unhelpful", "name missing: " + msg)
    except Exception as exc:  # noqa: BLE001 - the point is to see what escapes
        return "unhelpful", f"{type(exc).__name__}: {str(exc)[:200]}"
    if isinstance(res, CliResult):
        return res.classify(exp)
    if exp.kind == "err":
        return "silent", f"returned {_short(res)}"
    if exp.check is not None:
        try:
            good = exp.check(res)
        except Exception as exc:  # noqa: BLE001
            good, res = False, f"check raised {type(exc).__name__}: {exc}"
        if not good:
            return "silent", f"wrong result {_short(res)}"
    return "valid", _short(res)


def _short(x):
    s = repr(x)
    return s if len(s) < 120 else s[:117] + "..."


# ------------------------------------------------------------------------------------------- the CLI
class CliResult:
    def __init__(self, rc, out, err_text):
        self.rc, self.out, self.err = rc, out, err_text

    def classify(self, exp):
        lines = [ln for ln in self.err.splitlines() if ln.strip()]
        if self.rc == 0:
            if exp.kind == "err":
                return "silent", f"exit 0: {self.out[-100:]!r}"
            return "valid", "exit 0"
        if "Traceback" in self.err:
            return "unhelpful", "traceback: " + (lines[-1] if lines else "")
        if exp.kind == "ok":
            return "unhelpful", f"valid input rejected (exit {self.rc}): {lines[-1:] }"
        if self.rc != 2 or len(lines) != 1 or "error:" not in lines[0]:
            return "unhelpful", f"exit {self.rc}, {len(lines)} stderr lines: {lines[-1:]}"
        if not _names_in(lines[0], exp.names):
            return "unhelpful", "name missing: " + lines[0]
        return "clear", lines[0]


def cli(*argv):
    """Run `exactspec ARGV` in this process (as the console script does: `sys.exit(main())`)."""
    def run():
        from exactspec.cli import main

        out, errb = io.StringIO(), io.StringIO()
        threads = torch.get_num_threads()
        rc = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(errb):
            try:
                rc = main(list(argv))
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except CaseTimeout:
                raise
            except Exception:  # what the console script would print: a traceback, exit 1
                traceback.print_exc()
                rc = 1
            finally:
                torch.set_num_threads(threads)
        return CliResult(rc, out.getvalue(), errb.getvalue())
    return run


# ------------------------------------------------------------------------------------------- fixtures
def good_verify(B=2, K=3, V=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    tp = torch.softmax(torch.randn(B, K + 1, V, generator=g), -1)
    dp = torch.softmax(torch.randn(B, K, V, generator=g), -1)
    x = torch.multinomial(dp.reshape(-1, V), 1, generator=g).reshape(B, K)
    return tp, dp, x


def tiny_llama(vocab=32, max_pos=64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=max_pos, vocab_size=vocab,
                      pad_token_id=0, bos_token_id=None, eos_token_id=None)
    return LlamaForCausalLM(cfg).eval()


def bert_lm(vocab=32):
    from transformers import BertConfig, BertLMHeadModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64, is_decoder=False)
    with contextlib.redirect_stderr(io.StringIO()):
        return BertLMHeadModel(cfg).eval()


def gen():
    return torch.Generator().manual_seed(0)


# -------------------------------------------------------------------------------------------- cases
def sampling_cases():
    from exactspec import probs_from_logits, sample_from_probs

    L = torch.randn(2, 5)
    rowsum1 = lambda p: bool(torch.allclose(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-5))  # noqa: E731
    for name, bads, goods in (
        ("temperature", [True, "1", None, NAN, INF, -1, -INF, [1.0], 1j], [0, 0.0, 1, 2.5, np.float32(0.7)]),
        ("top_k", [True, 1.5, "3", -1, None, NAN, [2]], [0, 1, 100, np.int64(2)]),
        ("top_p", [-0.1, 1.1, NAN, True, "0.5", None, INF], [0, 1, 0.5, np.float64(0.3)]),
        ("min_p", [-0.1, 1.1, NAN, True, "0.5", None], [0, 1, 0.2]),
    ):
        for v in bads:
            case("probs_from_logits", f"{name}={v!r}", lambda v=v, n=name: probs_from_logits(L, **{n: v}), err(name))
        for v in goods:
            case("probs_from_logits", f"{name}={v!r}", lambda v=v, n=name: probs_from_logits(L, **{n: v}),
                 ok(rowsum1))
    nanrow = torch.randn(2, 5); nanrow[1, 2] = NAN
    infrow = torch.randn(2, 5); infrow[0, 0] = INF
    ninf = torch.randn(2, 5); ninf[1] = -INF
    for desc, x in (("list", [[1.0, 2.0]]), ("numpy", np.zeros((2, 3))), ("int tensor", torch.ones(2, 3, dtype=torch.long)),
                    ("0-d", torch.tensor(1.0)), ("V=0", torch.zeros(2, 0)), ("NaN row", nanrow),
                    ("+inf row", infrow), ("all -inf row", ninf), ("bool", torch.ones(2, 2, dtype=torch.bool)),
                    ("None", None), ("str", "abc"), ("complex", torch.zeros(2, 3, dtype=torch.complex64))):
        case("probs_from_logits", f"logits={desc}", lambda x=x: probs_from_logits(x), err("logits"))
        if desc in ("NaN row", "+inf row", "all -inf row"):
            case("probs_from_logits", f"logits={desc}, T=0", lambda x=x: probs_from_logits(x, temperature=0),
                 err("logits"))
    partial = torch.randn(2, 5); partial[:, :2] = -INF
    for desc, x in (("fp16", L.half()), ("bf16", L.bfloat16()), ("fp64", L.double()), ("1-d", torch.randn(7)),
                    ("empty batch", torch.zeros(0, 5)), ("partial -inf", partial), ("V=1", torch.randn(3, 1))):
        case("probs_from_logits", f"logits={desc}", lambda x=x: probs_from_logits(x), ok(rowsum1))

    in_support = lambda p: lambda t: bool((p.reshape(-1, p.shape[-1]).gather(1, t.reshape(-1, 1)) > 0).all())  # noqa: E731
    P = torch.softmax(torch.randn(3, 6), -1)
    for desc, g in (("'abc'", "abc"), ("5", 5), ("numpy rng", np.random.default_rng(0)), ("seed list", [0])):
        case("sample_from_probs", f"generator={desc}", lambda g=g: sample_from_probs(P, g), err("generator"))
    z = P.clone(); z[1] = 0
    neg = P.clone(); neg[0, 1] = -0.5
    nanp = P.clone(); nanp[2, 0] = NAN
    infp = P.clone(); infp[2, 0] = INF
    zl = torch.softmax(torch.randn(2, 3000), -1); zl[0] = 0
    negl = torch.softmax(torch.randn(2, 3000), -1); negl[1, 5] = -1.0
    for desc, x in (("all-zero row", z), ("negative entry", neg), ("NaN", nanp), ("inf", infp),
                    ("all-zero row, V=3000", zl), ("negative entry, V=3000", negl), ("list", [[0.5, 0.5]]),
                    ("int tensor", torch.ones(2, 3, dtype=torch.long)), ("0-d", torch.tensor(1.0)),
                    ("V=0", torch.zeros(2, 0)), ("bool", torch.ones(2, 2, dtype=torch.bool)), ("None", None)):
        case("sample_from_probs", f"probs={desc}", lambda x=x: sample_from_probs(x, gen()), err("probs"))
    big = torch.softmax(torch.randn(4, 5000), -1)
    onehot = torch.zeros(2, 9); onehot[:, 4] = 1
    sparse = torch.zeros(2, 2000); sparse[:, 1999] = 3.0
    for desc, x in (("unnormalised", P * 7), ("fp16", P.half()), ("fp64", P.double()), ("V=5000", big),
                    ("one-hot", onehot), ("last of 2000", sparse), ("1-d", P[0])):
        case("sample_from_probs", f"probs={desc}", lambda x=x: sample_from_probs(x, gen()), ok(in_support(x)))
    case("sample_from_probs", "probs=empty batch", lambda: sample_from_probs(torch.zeros(0, 4)),
         ok(lambda t: t.shape == (0,)))
    case("sample_from_probs", "generator=None", lambda: sample_from_probs(P), ok(in_support(P)))


def verify_cases():
    from exactspec import verify
    from exactspec.verification.rules import verify_logits

    tp, dp, x = good_verify()
    B, K, V = 2, 3, 5
    verdict_ok = lambda v: v.accepted.shape == (B,) and bool(((v.next_token >= 0) & (v.next_token < V)).all())  # noqa: E731

    def V_(**kw):
        args = dict(target_probs=tp, draft_probs=dp, draft_tokens=x)
        pos = [args.pop("target_probs"), args.pop("draft_probs"), args.pop("draft_tokens")]
        for i, n in enumerate(("target_probs", "draft_probs", "draft_tokens")):
            if n in kw:
                pos[i] = kw.pop(n)
        return verify(*pos, **kw)

    for method in ("token", "block", "greedy"):
        case("verify", f"valid {method}", lambda m=method: V_(method=m, generator=gen()), ok(verdict_ok))
    for m in ("Token", None, 1, "", ["token"]):
        case("verify", f"method={m!r}", lambda m=m: V_(method=m), err("method"))
    for c in ("all", None, True, 0):
        case("verify", f"checks={c!r}", lambda c=c: V_(checks=c), err("checks"))
    for g in ("abc", 5, np.random.default_rng(0), 0.5):
        case("verify", f"generator={g!r}", lambda g=g: V_(generator=g), err("generator"))
    bad_tp = {"list": tp.tolist(), "2-d": tp[:, 0], "int": (tp * 10).long(), "numpy": tp.numpy(),
              "None": None, "K mismatch": tp[:, :3], "B mismatch": tp[:1]}
    for d, v in bad_tp.items():
        case("verify", f"target_probs={d}", lambda v=v: V_(target_probs=v), err("target_probs", "draft_tokens",
                                                                                  "draft_probs"))
    bad_dp = {"list": dp.tolist(), "V mismatch": dp[..., :4], "int": (dp * 10).long(), "K mismatch": dp[:, :2],
              "numpy": dp.numpy()}
    for d, v in bad_dp.items():
        case("verify", f"draft_probs={d}", lambda v=v: V_(draft_probs=v), err("draft_probs"))
    case("verify", "draft_probs=None, token", lambda: V_(draft_probs=None), err("draft_probs"))
    case("verify", "draft_probs=None, greedy", lambda: V_(draft_probs=None, method="greedy"), ok(verdict_ok))
    bad_x = {"float": x.float(), "list": x.tolist(), "out of range": x + V, "negative": x - 10,
             "shape": x[:, :2], "1-d": x[0], "bool": x > 0}
    for d, v in bad_x.items():
        case("verify", f"draft_tokens={d}", lambda v=v: V_(draft_tokens=v), err("draft_tokens"))
    bad_L = {"float": torch.tensor([1.0, 2.0]), "negative": torch.tensor([-1, 2]), "> K": torch.tensor([4, 1]),
             "shape": torch.tensor([1, 2, 3]), "list": [1, 2], "bool": torch.tensor([True, False])}
    for d, v in bad_L.items():
        case("verify", f"draft_lengths={d}", lambda v=v: V_(draft_lengths=v), err("draft_lengths"))
    case("verify", "draft_lengths=0s", lambda: V_(draft_lengths=torch.zeros(2, dtype=torch.long), generator=gen()),
         ok(lambda v: bool((v.accepted == 0).all())))
    case("verify", "K=0", lambda: verify(tp[:, :1], dp[:, :0], x[:, :0], generator=gen()),
         ok(lambda v: v.accepted.shape == (2,)))
    case("verify", "B=0", lambda: verify(tp[:0], dp[:0], x[:0]), ok(lambda v: v.accepted.shape == (0,)))
    # Rows the rule reads are checked by default; what it never reads only under checks="full".
    for method in ("token", "block"):
        for d, mut in (("NaN at drafted token", lambda t, d_, x_: t.__setitem__((0, 0, int(x_[0, 0])), NAN)),
                       ("negative at drafted q", lambda t, d_, x_: d_.__setitem__((1, 0, int(x_[1, 0])), -0.1)),
                       ("target rows x2", lambda t, d_, x_: t.mul_(2)),
                       ("draft rows x2", lambda t, d_, x_: d_.mul_(2)),
                       ("q=0 at drafted token", lambda t, d_, x_: d_.__setitem__((0, 1, int(x_[0, 1])), 0.0))):
            for checks in ("rule", "full"):
                def f(mut=mut, m=method, c=checks):
                    t, d_, x_ = good_verify()
                    mut(t, d_, x_)
                    return verify(t, d_, x_, method=m, checks=c, generator=gen())
                case("verify", f"{method}, {d}, checks={checks}", f, err("target_probs", "draft_probs"))
    # An element the rule never reads (default: documented as not scanned); checks="full" scans it.
    def unread(checks):
        t, d_, x_ = good_verify()
        t[0, 0, (int(x_[0, 0]) + 1) % V] = NAN  # read by "full" only: the token rule gathers p_0(x_0)
        return verify(t, d_, x_, method="token", checks=checks, generator=gen())
    case("verify", "token, NaN off the drafted token, checks=full", lambda: unread("full"), err("target_probs"))
    case("verify", "greedy, NaN in a read row", lambda: verify(tp.clone().fill_(NAN), None, x, method="greedy"),
         err("target_probs"))

    # verify_logits: errors name the logits arguments
    tl, dl = torch.randn(B, K + 1, V), torch.randn(B, K, V)
    for method in ("token", "block", "greedy"):
        case("verify_logits", f"valid {method}", lambda m=method: verify_logits(tl, dl, x, method=m, generator=gen()),
             ok(verdict_ok))
        case("verify_logits", f"{method}: target_logits 2-d", lambda m=method: verify_logits(tl[:, 0], dl, x, method=m),
             err("target_logits"))
        case("verify_logits", f"{method}: draft_logits vocab", lambda m=method: verify_logits(tl, dl[..., :4], x, method=m),
             err("draft_logits"))
        case("verify_logits", f"{method}: target_logits int",
             lambda m=method: verify_logits(tl.long(), dl, x, method=m), err("target_logits"))
        case("verify_logits", f"{method}: draft_logits list",
             lambda m=method: verify_logits(tl, dl.tolist(), x, method=m), err("draft_logits"))
        case("verify_logits", f"{method}: NaN target_logits",
             lambda m=method: verify_logits(torch.full_like(tl, NAN), dl, x, method=m), err("target_logits"))
        case("verify_logits", f"{method}: temperature=nan",
             lambda m=method: verify_logits(tl, dl, x, method=m, temperature=NAN), err("temperature"))
        case("verify_logits", f"{method}: generator='abc'",
             lambda m=method: verify_logits(tl, dl, x, method=m, generator="abc"), err("generator"))
    case("verify_logits", "draft_logits=None, token", lambda: verify_logits(tl, None, x), err("draft_logits"))
    case("verify_logits", "top_k=-1", lambda: verify_logits(tl, dl, x, top_k=-1), err("top_k"))
    case("verify_logits", "draft_tokens out of range", lambda: verify_logits(tl, dl, x + V), err("draft_tokens"))


def candidates_cases():
    from exactspec import TokenTree, verify_candidates, verify_tree

    g0 = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(2, 6, generator=g0), -1)
    q = torch.softmax(torch.randn(2, 6, generator=g0), -1)
    c = torch.tensor([[0, 1, 2], [3, 4, 5]])
    okc = lambda r: r[0].shape == (2,) and bool(((r[1] >= 0) & (r[1] < 6)).all())  # noqa: E731
    for s in ("iid", "without_replacement", "deterministic"):
        case("verify_candidates", f"valid {s}", lambda s=s: verify_candidates(p, q, c, scheme=s, generator=gen()), ok(okc))
        case("verify_candidates", f"zero candidates {s}",
             lambda s=s: verify_candidates(p, q, c[:, :0], scheme=s, generator=gen()),
             ok(lambda r: bool((r[0] == -1).all()) and okc(r)))
    for d, kw in (("scheme='IID'", dict(scheme="IID")), ("scheme=None", dict(scheme=None)),
                  ("checks='x'", dict(scheme="iid", checks="x")), ("generator='abc'", dict(scheme="iid", generator="abc")),
                  ("generator=3", dict(scheme="iid", generator=3))):
        name = d.split("=")[0]
        case("verify_candidates", d, lambda kw=kw: verify_candidates(p, q, c, **kw), err(name))
    for d, args, name in (
        ("target_probs 1-d", (p[0], q, c), "target_probs"), ("target_probs list", (p.tolist(), q, c), "target_probs"),
        ("target_probs int", ((p * 9).long(), q, c), "target_probs"),
        ("target_probs NaN", (torch.full_like(p, NAN), q, c), "target_probs"),
        ("target_probs unnormalised", (p * 3, q, c), "target_probs"),
        ("draft_probs list", (p, q.tolist(), c), "draft_probs"), ("draft_probs vocab", (p, q[:, :5], c), "draft_probs"),
        ("draft_probs negative", (p, q - 0.5, c), "draft_probs"), ("draft_probs None iid", (p, None, c), "draft_probs"),
        ("candidates float", (p, q, c.float()), "candidates"), ("candidates out of range", (p, q, c + 6), "candidates"),
        ("candidates < -1", (p, q, c - 5), "candidates"), ("candidates list", (p, q, c.tolist()), "candidates"),
        ("candidates B", (p, q, c[:1]), "candidates"),
    ):
        case("verify_candidates", d, lambda a=args: verify_candidates(*a, scheme="iid"), err(name))
    case("verify_candidates", "padding -1 only",
         lambda: verify_candidates(p, q, torch.full((2, 2), -1), scheme="iid", generator=gen()),
         ok(lambda r: bool((r[0] == -1).all()) and okc(r)))

    for d, kw, name in (
        ("parents=[-1, 0.7]", dict(parents=[-1, 0.7], tokens=[1, 2]), "parents"),
        ("parents=[-1, True]", dict(parents=[-1, True], tokens=[1, 2]), "parents"),
        ("parents=['a']", dict(parents=["a"], tokens=[1]), "parents"),
        ("parents=[0]", dict(parents=[0], tokens=[1]), "parents"),
        ("parents=[-2]", dict(parents=[-2], tokens=[1]), "parents"),
        ("parents 2-d", dict(parents=[[-1]], tokens=[1]), "parents"),
        ("parents float tensor", dict(parents=torch.tensor([-1.0, 0.0]), tokens=[1, 2]), "parents"),
        ("tokens=[1.5, 2]", dict(parents=[-1, 0], tokens=[1.5, 2]), "tokens"),
        ("tokens=[-3, 2]", dict(parents=[-1, 0], tokens=[-3, 2]), "tokens"),
        ("tokens length", dict(parents=[-1, 0], tokens=[1]), "tokens"),
        ("tokens 3-d", dict(parents=[-1], tokens=[[[1]]]), "tokens"),
        ("tokens=None", dict(parents=[-1], tokens=None), "tokens"),
    ):
        case("TokenTree", d, lambda kw=kw: TokenTree(**kw), err(name))
    case("TokenTree", "empty tree", lambda: TokenTree([], []), ok(lambda t: t.num_nodes == 0))
    tree = TokenTree([-1, -1, 0], [1, 2, 3])
    tpt = torch.softmax(torch.randn(2, 4, 6), -1)
    dpt = torch.softmax(torch.randn(2, 4, 6), -1)
    tv_ok = lambda v: v.accepted.shape == (2,)  # noqa: E731
    case("verify_tree", "valid", lambda: verify_tree(tree, tpt, dpt, scheme="without_replacement", generator=gen()),
         ok(tv_ok))
    case("verify_tree", "empty tree", lambda: verify_tree(TokenTree([], []), tpt[:, :1], dpt[:, :1], scheme="iid"),
         ok(lambda v: bool((v.accepted == 0).all())))
    for d, f, name in (
        ("tree=list", lambda: verify_tree([-1, 0], tpt, dpt, scheme="iid"), "tree"),
        ("target_probs list", lambda: verify_tree(tree, tpt.tolist(), dpt, scheme="iid"), "target_probs"),
        ("target_probs N", lambda: verify_tree(tree, tpt[:, :3], dpt, scheme="iid"), "target_probs"),
        ("draft_probs list", lambda: verify_tree(tree, tpt, dpt.tolist(), scheme="iid"), "draft_probs"),
        ("draft_probs shape", lambda: verify_tree(tree, tpt, dpt[:, :, :5], scheme="iid"), "draft_probs"),
        ("tokens out of vocab", lambda: verify_tree(TokenTree([-1], [9]), tpt[:, :2], dpt[:, :2], scheme="iid"),
         "tokens"),
        ("scheme bad", lambda: verify_tree(tree, tpt, dpt, scheme="bfs"), "scheme"),
        ("generator bad", lambda: verify_tree(tree, tpt, dpt, scheme="iid", generator="x"), "generator"),
        ("target_probs int", lambda: verify_tree(tree, (tpt * 9).long(), dpt, scheme="iid"), "target_probs"),
    ):
        case("verify_tree", d, f, err(name))


def speedup_cases():
    from exactspec.speed import speedup as sp
    from exactspec.speed.costmodel import CostModel

    cm = CostModel(0.001, {1: 0.01, 2: 0.011, 8: 0.02})
    num = lambda r: isinstance(r, float) and math.isfinite(r)  # noqa: E731
    bad_alpha = {"'0.5'": "0.5", "True": True, "None": None, "[]": [], "nan": NAN, "inf": INF, "-0.1": -0.1,
                 "1.1": 1.1, "1j": 1j, "dict": {"a": 0.5}, "['0.5']": ["0.5"], "[True]": [True], "'abc'": "abc",
                 "[0.5, nan]": [0.5, NAN]}
    fns = {
        "expected_tokens": lambda a: sp.expected_tokens(a, 3),
        "walltime_speedup": lambda a: sp.walltime_speedup(a, 3, 0.1),
        "optimal_gamma": lambda a: sp.optimal_gamma(a, 0.1),
        "speedup_limit": lambda a: sp.speedup_limit(a, 0.1),
        "ops_factor": lambda a: sp.ops_factor(a, 3, 0.1),
        "speculation_helps": lambda a: sp.speculation_helps(a, 0.1),
    }
    for fname, f in fns.items():
        for d, a in bad_alpha.items():
            case("speedup", f"{fname}(alpha={d})", lambda f=f, a=a: f(a), err("alpha"))
    for d, a in (("np.float32", np.float32(0.5)), ("tensor", torch.tensor(0.5)), ("[0.9, 0.5]", [0.9, 0.5]),
                 ("0", 0), ("1", 1)):
        case("speedup", f"expected_tokens(alpha={d})", lambda a=a: sp.expected_tokens(a, 3), ok(num))
    for fname, f in (("expected_tokens", lambda g: sp.expected_tokens(0.5, g)),
                     ("walltime_speedup", lambda g: sp.walltime_speedup(0.5, g, 0.1)),
                     ("ops_factor", lambda g: sp.ops_factor(0.5, g, 0.1))):
        for g in (True, "3", -1, 2.5, None, NAN, [3], 4.0):
            case("speedup", f"{fname}(gamma={g!r})", lambda f=f, g=g: f(g), err("gamma"))
        case("speedup", f"{fname}(gamma=np.int64(3))", lambda f=f: f(np.int64(3)), ok(num))
    big = lambda r: num(r) and r > 0  # noqa: E731
    case("speedup", "walltime_speedup(.8, 10**15, .1)", lambda: sp.walltime_speedup(0.8, 10**15, 0.1),
         ok(lambda r: num(r) and r < 1e-12))
    case("speedup", "expected_tokens(.8, 10**15)", lambda: sp.expected_tokens(0.8, 10**15),
         ok(lambda r: abs(r - 5.0) < 1e-9))
    case("speedup", "expected_tokens(1, 10**15)", lambda: sp.expected_tokens(1.0, 10**15),
         ok(lambda r: r == 10**15 + 1))
    case("speedup", "expected_tokens([.9,.5], 10**12)", lambda: sp.expected_tokens([0.9, 0.5], 10**12),
         ok(lambda r: abs(r - (1 + 0.9 + 0.9 * 0.5 / 0.5)) < 1e-9))
    case("speedup", "ops_factor(.5, 10**15, .1)", lambda: sp.ops_factor(0.5, 10**15, 0.1), ok(big))
    case("speedup", "walltime_speedup(.8, 10**15, cm)", lambda: sp.walltime_speedup(0.8, 10**15, cm), ok(num))
    for c in (True, "0.1", None, NAN, -1, INF, [0.1], "abc", 1j):
        case("speedup", f"walltime_speedup(cost={c!r})", lambda c=c: sp.walltime_speedup(0.8, 4, c), err("cost"))
        case("speedup", f"optimal_gamma(cost={c!r})", lambda c=c: sp.optimal_gamma(0.8, c), err("cost"))
    for c in (True, "0.1", NAN, -1, cm):
        case("speedup", f"ops_factor(ops_cost={c!r})", lambda c=c: sp.ops_factor(0.8, 4, c), err("ops_cost"))
    case("speedup", "walltime_speedup(cost=np.float32)", lambda: sp.walltime_speedup(0.8, 4, np.float32(0.1)), ok(num))
    case("speedup", "walltime_speedup(cost=cm)", lambda: sp.walltime_speedup(0.8, 4, cm), ok(num))
    for m in (True, 0, 2.5, "8", -3, 10**15):
        case("speedup", f"optimal_gamma(max_gamma={m!r})", lambda m=m: sp.optimal_gamma(0.8, 0.1, m), err("max_gamma"))
    for h in (True, 0.5, "8", -1, 10**15):
        case("speedup", f"speedup_limit(cm, horizon={h!r})", lambda h=h: sp.speedup_limit(0.8, cm, h), err("horizon"))
    case("speedup", "speedup_limit(.8, 0)", lambda: sp.speedup_limit(0.8, 0.0), ok(lambda r: abs(r - 5) < 1e-9))
    case("speedup", "speedup_limit(1, 0)", lambda: sp.speedup_limit(1.0, 0.0), ok(lambda r: r == INF))
    case("speedup", "optimal_gamma([[.5]])", lambda: sp.optimal_gamma([[0.5]], 0.1), err("alpha"))
    # acceptance_rate
    for d, (p, q) in {"p=[-1,2]": ([-1, 2], [0.5, 0.5]), "q=[2,-1]": ([0.5, 0.5], [2, -1]),
                      "p unnormalised": ([0.5, 0.9], [0.5, 0.5]), "NaN": ([NAN, 1], [0.5, 0.5]),
                      "inf": ([INF, 0], [0.5, 0.5]), "str": ("ab", [0.5, 0.5]), "scalar": (0.5, 0.5),
                      "shape mismatch": ([0.5, 0.5], [0.2, 0.3, 0.5]), "empty": ([], []),
                      "torch negative": (torch.tensor([-1.0, 2.0]), torch.tensor([0.5, 0.5])),
                      "torch shape": (torch.tensor([0.5, 0.5]), torch.tensor([0.2, 0.3, 0.5])),
                      "None": (None, [1.0]), "bools": ([True, False], [1.0, 0.0])}.items():
        names = ("p", "q")
        case("speedup", f"acceptance_rate({d})", lambda p=p, q=q: sp.acceptance_rate(p, q), err(*names))
    case("speedup", "acceptance_rate valid", lambda: sp.acceptance_rate([0.2, 0.8], [0.5, 0.5]),
         ok(lambda r: abs(r - 0.7) < 1e-12))
    case("speedup", "acceptance_rate torch fp16", lambda: sp.acceptance_rate(torch.tensor([0.2, 0.8]).half(),
                                                                             torch.tensor([0.5, 0.5]).half()),
         ok(lambda r: abs(float(r) - 0.7) < 1e-3))
    case("speedup", "acceptance_rate batched", lambda: sp.acceptance_rate([[0.2, 0.8], [1, 0]], [0.5, 0.5]),
         ok(lambda r: np.allclose(r, [0.7, 0.5])))
    # mixed / end-to-end
    for lc in ("abc", [], [0, 0], [-1, 2], [NAN, 1], [[1, 2]], None, [True, 1], ["1", "2"]):
        case("speedup", f"mixed_length_speedup(length_counts={lc!r})",
             lambda lc=lc: sp.mixed_length_speedup(0.8, lc, 0.1), err("length_counts"))
    case("speedup", "mixed_length_speedup valid", lambda: sp.mixed_length_speedup(0.8, [1, 2, 3], 0.1), ok(num))
    for kw, name in ((dict(n_tokens=0), "n_tokens"), (dict(n_tokens=True), "n_tokens"), (dict(n_tokens=5.0), "n_tokens"),
                     (dict(n_tokens=10, prefill_plain=True), "prefill_plain"),
                     (dict(n_tokens=10, prefill_plain="1"), "prefill_plain"),
                     (dict(n_tokens=10, prefill_spec=NAN), "prefill_spec"),
                     (dict(n_tokens=10, prefill_spec=-1), "prefill_spec")):
        case("speedup", f"end_to_end_speedup({kw})", lambda kw=kw: sp.end_to_end_speedup(0.8, [0, 1], cm, **kw), err(name))
    case("speedup", "end_to_end_speedup(cost=float)", lambda: sp.end_to_end_speedup(0.8, [0, 1], 0.1, 10), err("cost"))
    case("speedup", "end_to_end_speedup valid", lambda: sp.end_to_end_speedup(0.8, [0, 1], cm, 10, 0.01, 0.02), ok(num))


def acceptance_cases():
    from exactspec import expected_accepted_block, expected_accepted_token_rule, multi_draft_acceptance

    p, q = [0.6, 0.4], [0.5, 0.5]
    num = lambda r: isinstance(r, float) and 0 <= r  # noqa: E731
    for fname, f in (("expected_accepted_token_rule", expected_accepted_token_rule),
                     ("expected_accepted_block", expected_accepted_block)):
        for K in (True, 0, 2.0, "2", None, -1):
            case("acceptance", f"{fname}(K={K!r})", lambda f=f, K=K: f(p, q, K), err("K"))
        for d, pp, qq in (("p unnormalised", [0.6, 0.6], q), ("q NaN", p, [NAN, 1]), ("p str", "ab", q),
                          ("q negative", p, [1.5, -0.5]), ("size mismatch", p, [0.2, 0.3, 0.5]),
                          ("p None", None, q), ("p bools", [True, False], q)):
            case("acceptance", f"{fname}({d})", lambda f=f, pp=pp, qq=qq: f(pp, qq, 2), err("p", "q"))
        case("acceptance", f"{fname}(K=40, V=4): enumeration too large",
             lambda f=f: f([0.25] * 4, [0.25] * 4, 40), err("K"))
        case("acceptance", f"{fname} valid", lambda f=f: f(p, q, 3), ok(num))
    for n in (True, 0, 1.5, "2", -1):
        case("acceptance", f"multi_draft_acceptance(n={n!r})", lambda n=n: multi_draft_acceptance(p, q, n), err("n"))
    for s in ("IID", None, 3):
        case("acceptance", f"multi_draft_acceptance(scheme={s!r})", lambda s=s: multi_draft_acceptance(p, q, 2, s),
             err("scheme"))
    case("acceptance", "multi_draft_acceptance size mismatch", lambda: multi_draft_acceptance(p, [0.2, 0.3, 0.5], 2),
         err("p", "q"))
    case("acceptance", "multi_draft_acceptance(n=30, V=8) iid: too large",
         lambda: multi_draft_acceptance([0.125] * 8, [0.1] * 7 + [0.3], 30), err("n"))
    case("acceptance", "multi_draft_acceptance valid", lambda: multi_draft_acceptance(p, q, 2), ok(num))


def costmodel_cases(tmp):
    from exactspec.speed.costmodel import CostModel

    for d, args, name in (
        ("t_draft=True", (True, {1: 0.01}), "t_draft"), ("t_draft='0.1'", ("0.1", {1: 0.01}), "t_draft"),
        ("t_draft=nan", (NAN, {1: 0.01}), "t_draft"), ("t_draft=-1", (-1, {1: 0.01}), "t_draft"),
        ("t_draft=None", (None, {1: 0.01}), "t_draft"),
        ("target_times={}", (0.1, {}), "target_times"), ("target_times=None", (0.1, None), "target_times"),
        ("target_times=[0.1]", (0.1, [0.1]), "target_times"),
        ("target_times={1: '0.1'}", (0.1, {1: "0.1"}), "target_times"),
        ("target_times={True: 0.1}", (0.1, {True: 0.1}), "target_times"),
        ("target_times={'1': 0.1}", (0.1, {"1": 0.1}), "target_times"),
        ("target_times={1.5: 0.1}", (0.1, {1.5: 0.1}), "target_times"),
        ("target_times={0: 0.1}", (0.1, {0: 0.1}), "target_times"),
        ("target_times={1: 0}", (0.1, {1: 0}), "target_times"),
        ("target_times={1: nan}", (0.1, {1: NAN}), "target_times"),
    ):
        case("CostModel", d, lambda a=args: CostModel(*a), err(name))
    for kw, name in ((dict(t_overhead="1"), "t_overhead"), (dict(t_overhead=True), "t_overhead"),
                     (dict(t_draft_cold=-1), "t_draft_cold"), (dict(metadata=5), "metadata")):
        case("CostModel", f"{kw}", lambda kw=kw: CostModel(0.1, {1: 0.01}, **kw), err(name))
    cm = CostModel(0.001, {1: 0.01, 4: 0.02})
    for k in ("2", True, NAN, 0, None, INF):
        case("CostModel", f"t_target({k!r})", lambda k=k: cm.t_target(k), err("k"))
    case("CostModel", "t_target(2.5)", lambda: cm.t_target(2.5), ok(lambda r: 0.01 < r < 0.02))
    for g in ("2", True, -1, 1.5, None):
        case("CostModel", f"step_time({g!r})", lambda g=g: cm.step_time(g), err("gamma"))
    for d, obj in (("list", [1]), ("missing t_draft", {"target_times": {"1": 0.1}}), ("None", None),
                   ("target_times list", {"t_draft": 0.1, "target_times": [1]}),
                   ("bad format", {"format": "other/9", "t_draft": 0.1, "target_times": {"1": 0.1}})):
        case("CostModel", f"from_dict({d})", lambda o=obj: CostModel.from_dict(o), err("cost model", "t_draft",
                                                                                   "target_times", "format", "dict"))
    case("CostModel", "from_dict round trip", lambda: CostModel.from_dict(json.loads(json.dumps(cm.to_dict()))),
         ok(lambda r: r == cm))
    case("CostModel", "load(missing)", lambda: CostModel.load(os.path.join(tmp, "nope.json")), err("nope.json"))
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as fh:
        fh.write("{not json")
    case("CostModel", "load(bad json)", lambda: CostModel.load(bad), err("bad.json"))
    for d, kw, name in (("calibrate(stats=5)", dict(stats=5), "stats"), ("calibrate(stats=[])", dict(stats=[]), "stats"),
                        ("calibrate(stats='x')", dict(stats="x"), "stats")):
        case("CostModel", d, lambda kw=kw: cm.calibrate(**kw), err(name))
    m = tiny_llama()
    for kw, name in ((dict(prompt_len=0), "prompt_len"), (dict(batch_size=True), "batch_size"),
                     (dict(repeats=0), "repeats"), (dict(ks=[0, 2]), "ks"), (dict(ks=["a"]), "ks"),
                     (dict(ks=[1.5]), "ks"), (dict(generator="x"), "generator"), (dict(seed="1"), "seed"),
                     (dict(prompt_len=1000), "prompt_len")):
        case("CostModel", f"measure({kw})", lambda kw=kw: CostModel.measure(m, m, repeats=kw.pop("repeats", 1),
                                                                            warmup=0, **kw), err(name))
    case("CostModel", "measure(target=5)", lambda: CostModel.measure(5, m), err("target"))


def generator_cases():
    from exactspec import PromptLookupDrafter, SpeculativeGenerator
    from exactspec.speed.costmodel import CostModel

    t = tiny_llama()
    d = tiny_llama()
    bert = bert_lm()
    ids = torch.randint(1, 32, (2, 5), generator=torch.Generator().manual_seed(1))
    seq_ok = lambda n: lambda o: o.sequences.shape == (2, 5 + n)  # noqa: E731
    # constructor
    for desc, kw, name in (
        ("target=5", dict(target=5, draft=d), "target"), ("target=None", dict(target=None, draft=d), "target"),
        ("target=BertLMHeadModel(is_decoder=False)", dict(target=bert, drafter="prompt_lookup"), "target"),
        ("draft=BertLMHeadModel(is_decoder=False)", dict(target=t, draft=bert), "draft"),
        ("draft='small'", dict(target=t, draft="small"), "draft"),
        ("drafter='ngram'", dict(target=t, drafter="ngram"), "drafter"),
        ("drafter=5", dict(target=t, drafter=5), "drafter"),
        ("no draft", dict(target=t), "draft"),
        ("both", dict(target=t, draft=d, drafter="prompt_lookup"), "draft"),
        ("cost_model=5", dict(target=t, draft=d, cost_model=5), "cost_model"),
        ("cost_model={}", dict(target=t, draft=d, cost_model={}), "cost_model"),
        ("max_gamma=0", dict(target=t, draft=d, max_gamma=0), "max_gamma"),
        ("max_gamma=True", dict(target=t, draft=d, max_gamma=True), "max_gamma"),
        ("max_gamma=2.5", dict(target=t, draft=d, max_gamma=2.5), "max_gamma"),
        ("max_gamma='4'", dict(target=t, draft=d, max_gamma="4"), "max_gamma"),
        ("calibrate='no'", dict(target=t, draft=d, calibrate="no"), "calibrate"),
        ("calibrate=0", dict(target=t, draft=d, calibrate=0), "calibrate"),
        ("tokenizer='x' draft_tokenizer='y'", dict(target=t, draft=d, tokenizer="x", draft_tokenizer="y"), "tokenizer"),
    ):
        case("SpeculativeGenerator", desc, lambda kw=kw: SpeculativeGenerator(**kw), err(name))
    case("SpeculativeGenerator", "cost_model=CostModel",
         lambda: SpeculativeGenerator(t, d, cost_model=CostModel(0.001, {1: 0.01})), ok())
    case("SpeculativeGenerator", "max_gamma=np.int64(3)", lambda: SpeculativeGenerator(t, d, max_gamma=np.int64(3)), ok())
    for kw, name in ((dict(max_ngram=0), "max_ngram"), (dict(max_draft=True), "max_draft"),
                     (dict(min_ngram=4, max_ngram=2), "min_ngram"), (dict(max_ngram="3"), "max_ngram")):
        case("PromptLookupDrafter", f"{kw}", lambda kw=kw: PromptLookupDrafter(**kw), err(name))

    sg = SpeculativeGenerator(t, d)
    G = lambda **kw: sg.generate(kw.pop("input_ids", ids), kw.pop("attention_mask", None),  # noqa: E731
                                 **{"max_new_tokens": 3, "seed": 0, **kw})
    for desc, kw, name in (
        ("input_ids list", dict(input_ids=ids.tolist()), "input_ids"),
        ("input_ids float", dict(input_ids=ids.float()), "input_ids"),
        ("input_ids 1-d", dict(input_ids=ids[0]), "input_ids"),
        ("input_ids [2, 0]", dict(input_ids=ids[:, :0]), "input_ids"),
        ("input_ids out of vocab", dict(input_ids=ids + 100), "input_ids"),
        ("input_ids negative", dict(input_ids=ids - 100), "input_ids"),
        ("input_ids [0, 5]", dict(input_ids=ids[:0]), "input_ids"),
        ("attention_mask shape", dict(attention_mask=torch.ones(2, 4, dtype=torch.long)), "attention_mask"),
        ("attention_mask right-padded", dict(attention_mask=torch.tensor([[1, 1, 1, 1, 0]] * 2)), "attention_mask"),
        ("attention_mask values 2", dict(attention_mask=torch.full((2, 5), 2)), "attention_mask"),
        ("attention_mask list", dict(attention_mask=[[1] * 5] * 2), "attention_mask"),
        ("attention_mask all zero row", dict(attention_mask=torch.tensor([[1] * 5, [0] * 5])), "attention_mask"),
        ("max_new_tokens=-1", dict(max_new_tokens=-1), "max_new_tokens"),
        ("max_new_tokens=True", dict(max_new_tokens=True), "max_new_tokens"),
        ("max_new_tokens=2.0", dict(max_new_tokens=2.0), "max_new_tokens"),
        ("max_new_tokens='3'", dict(max_new_tokens="3"), "max_new_tokens"),
        ("max_new_tokens=None", dict(max_new_tokens=None), "max_new_tokens"),
        ("max_new_tokens beyond context", dict(max_new_tokens=100), "context"),
        ("do_sample='False'", dict(do_sample="False"), "do_sample"),
        ("do_sample=0", dict(do_sample=0), "do_sample"),
        ("do_sample=False, temperature=nan", dict(do_sample=False, temperature=NAN), "temperature"),
        ("temperature=nan", dict(temperature=NAN), "temperature"),
        ("temperature=inf", dict(temperature=INF), "temperature"),
        ("temperature=-1", dict(temperature=-1), "temperature"),
        ("temperature=True", dict(temperature=True), "temperature"),
        ("temperature='1'", dict(temperature="1"), "temperature"),
        ("do_sample=False, top_p=2", dict(do_sample=False, top_p=2.0), "top_p"),
        ("top_k=-1", dict(top_k=-1), "top_k"),
        ("top_k=2.5", dict(top_k=2.5), "top_k"),
        ("top_p=nan", dict(top_p=NAN), "top_p"),
        ("gamma=0", dict(gamma=0), "gamma"), ("gamma=2.5", dict(gamma=2.5), "gamma"),
        ("gamma='4'", dict(gamma="4"), "gamma"), ("gamma=True", dict(gamma=True), "gamma"),
        ("gamma='AUTO'", dict(gamma="AUTO"), "gamma"),
        ("method='Token'", dict(method="Token"), "method"), ("method=None", dict(method=None), "method"),
        ("eos_token_id=10**6", dict(eos_token_id=10**6), "eos_token_id"),
        ("eos_token_id=-1", dict(eos_token_id=-1), "eos_token_id"),
        ("eos_token_id='2'", dict(eos_token_id="2"), "eos_token_id"),
        ("eos_token_id=2.5", dict(eos_token_id=2.5), "eos_token_id"),
        ("eos_token_id=[1, 'a']", dict(eos_token_id=[1, "a"]), "eos_token_id"),
        ("eos_token_id=True", dict(eos_token_id=True), "eos_token_id"),
        ("eos_token_id=[[1]]", dict(eos_token_id=[[1]]), "eos_token_id"),
        ("pad_token_id=-1", dict(pad_token_id=-1), "pad_token_id"),
        ("pad_token_id=10**6", dict(pad_token_id=10**6), "pad_token_id"),
        ("pad_token_id=2.5", dict(pad_token_id=2.5), "pad_token_id"),
        ("pad_token_id='0'", dict(pad_token_id="0"), "pad_token_id"),
        ("seed=2**64", dict(seed=2**64), "seed"), ("seed='1'", dict(seed="1"), "seed"),
        ("seed=1.5", dict(seed=1.5), "seed"), ("seed=True", dict(seed=True), "seed"),
        ("seed=-2**70", dict(seed=-2**70), "seed"),
    ):
        case("SpeculativeGenerator.generate", desc, lambda kw=kw: G(**kw), err(name))
    for desc, kw, chk in (
        ("valid", {}, seq_ok(3)), ("max_new_tokens=0", dict(max_new_tokens=0), seq_ok(0)),
        ("do_sample=False", dict(do_sample=False), seq_ok(3)), ("temperature=0", dict(temperature=0), seq_ok(3)),
        ("gamma='auto'", dict(gamma="auto"), seq_ok(3)), ("eos_token_id=[]", dict(eos_token_id=[]), seq_ok(3)),
        ("eos_token_id=tensor", dict(eos_token_id=torch.tensor([3])), None),
        ("seed=2**64-1", dict(seed=2**64 - 1), seq_ok(3)), ("seed=np.int64(3)", dict(seed=np.int64(3)), seq_ok(3)),
        ("do_sample=np.bool_(False)", dict(do_sample=np.bool_(False)), seq_ok(3)),
        ("do_sample=None (the model's generation config)", dict(do_sample=None), seq_ok(3)),
        ("int32 input_ids", dict(input_ids=ids.int()), seq_ok(3)),
        ("bool attention_mask", dict(attention_mask=torch.ones(2, 5, dtype=torch.bool)), seq_ok(3)),
        ("method=block", dict(method="block"), seq_ok(3)),
    ):
        case("SpeculativeGenerator.generate", desc, lambda kw=kw: G(**kw), ok(chk))
    pl = SpeculativeGenerator(t, drafter="prompt_lookup")
    case("SpeculativeGenerator.generate", "prompt_lookup valid", lambda: pl.generate(ids, max_new_tokens=3, seed=0),
         ok(seq_ok(3)))
    # a non-causal model gives other tokens than its own generate: it must be rejected, not run
    case("SpeculativeGenerator", "Bert(is_decoder=False) as draft and target",
         lambda: SpeculativeGenerator(bert, bert_lm()).generate(ids, max_new_tokens=2, do_sample=False), err("target"))


def demo_explain_cases():
    from exactspec.pairs.stdlib import load_demo_pair, load_pair
    from exactspec.verification.explain import explain_position, parse_distribution

    for kw, name in ((dict(device="cuda:0"), "device"), (dict(device="gpu"), "device"), (dict(device=5), "device"),
                     (dict(dtype="float32"), "dtype"), (dict(dtype=torch.int64), "dtype"), (dict(dtype=5), "dtype")):
        case("load_demo_pair", f"{kw}", lambda kw=kw: load_demo_pair(**kw), err(name))
    case("load_pair", "target missing path", lambda: load_pair("/nonexistent/x", "/nonexistent/y"), err("/nonexistent"))
    case("load_pair", "draft without target", lambda: load_pair(None, "x"), err("draft"))
    for d, text in (("empty", ""), ("letters", "a,b"), ("nan", "nan,1"), ("negative", "-0.5,1.5"),
                    ("unnormalised", "0.5,0.6")):
        case("explain", f"parse_distribution({d})", lambda t=text: parse_distribution(t, "--target"), err("--target"))
    case("explain", "parse_distribution(normalize zero)", lambda: parse_distribution("0,0", "--target", True),
         err("--target"))
    for d, args, name in (("length mismatch", ([0.5, 0.5], [1.0]), "draft"), ("labels count", ([0.5, 0.5], [0.5, 0.5], ["a"]), "labels"),
                          ("target str", ("ab", [0.5, 0.5]), "target"), ("target NaN", ([NAN, 1], [0.5, 0.5]), "target"),
                          ("draft negative", ([0.5, 0.5], [1.5, -0.5]), "draft"),
                          ("target unnormalised", ([0.9, 0.9], [0.5, 0.5]), "target"),
                          ("target None", (None, [1.0]), "target")):
        case("explain", f"explain_position({d})", lambda a=args: explain_position(*a), err(name))
    case("explain", "explain_position valid", lambda: explain_position([0.2, 0.8], [0.5, 0.5]),
         ok(lambda r: all(abs(o - t) < 1e-12 for o, t in zip(r["output"], r["target"]))))


def cli_cases(tmp):
    missing = os.path.join(tmp, "missing.txt")
    empty = os.path.join(tmp, "empty.txt")
    open(empty, "w").close()
    costs = os.path.join(tmp, "costs.json")
    from exactspec.speed.costmodel import CostModel

    CostModel(0.001, {1: 0.01, 2: 0.011}).save(costs)
    badcosts = os.path.join(tmp, "badcosts.json")
    with open(badcosts, "w") as fh:
        fh.write("[1, 2]")
    nodir = os.path.join(tmp, "no_such_dir", "out.png")
    a_file = os.path.join(tmp, "a_file")
    open(a_file, "w").close()
    # global
    case("cli", "no command", cli(), either("command"))
    case("cli", "unknown command", cli("frobnicate"), err("frobnicate", "command"))
    # explain
    E = ("explain", "--target", "0.5,0.5", "--draft", "0.25,0.75")
    case("cli explain", "valid", cli(*E), ok())
    case("cli explain", "valid --json", cli(*E, "--json"), ok())
    for d, argv, name in (
        ("missing --draft", ("explain", "--target", "0.5,0.5"), "--draft"),
        ("letters", ("explain", "--target", "a,b", "--draft", "0.5,0.5"), "--target"),
        ("nan", ("explain", "--target", "nan,1", "--draft", "0.5,0.5"), "--target"),
        ("negative", ("explain", "--target", "-0.5,1.5", "--draft", "0.5,0.5"), "--target"),
        ("unnormalised", ("explain", "--target", "0.5,0.6", "--draft", "0.5,0.5"), "--target"),
        ("length mismatch", ("explain", "--target", "0.5,0.5", "--draft", "1"), "--draft"),
        ("labels count", (*E, "--labels", "a"), "--labels"),
        ("empty", ("explain", "--target", "", "--draft", "1"), "--target"),
        ("inf", ("explain", "--target", "inf,0", "--draft", "0.5,0.5"), "--target"),
    ):
        case("cli explain", d, cli(*argv), err(name))
    # speedup
    case("cli speedup", "valid", cli("speedup", "--alpha", "0.8", "--cost", "0.1"), ok())
    case("cli speedup", "valid --costs", cli("speedup", "--alpha", "0.8", "--costs", costs), ok())
    case("cli speedup", "valid --json", cli("speedup", "--alpha-per-position", "0.9,0.5", "--json"), ok())
    case("cli speedup", "valid --plot", cli("speedup", "--alpha", "0.8", "--plot", os.path.join(tmp, "p.png")), ok())
    for d, argv, name in (
        ("--alpha nan", ("--alpha", "nan"), "--alpha"), ("--alpha -0.1", ("--alpha", "-0.1"), "--alpha"),
        ("--alpha 1.5", ("--alpha", "1.5"), "--alpha"), ("--alpha abc", ("--alpha", "abc"), "--alpha"),
        ("--alpha inf", ("--alpha", "inf"), "--alpha"),
        ("no alpha", (), "--alpha"), ("--alpha-per-position 0.5,abc", ("--alpha-per-position", "0.5,abc"), "--alpha-per-position"),
        ("--alpha-per-position ''", ("--alpha-per-position", ""), "--alpha-per-position"),
        ("--alpha-per-position 0.5,nan", ("--alpha-per-position", "0.5,nan"), "--alpha-per-position"),
        ("--alpha-per-position 0.5,2", ("--alpha-per-position", "0.5,2"), "--alpha-per-position"),
        ("--alpha and --alpha-per-position", ("--alpha", "0.5", "--alpha-per-position", "0.5"), "--alpha"),
        ("--cost nan", ("--alpha", "0.8", "--cost", "nan"), "--cost"),
        ("--cost -1", ("--alpha", "0.8", "--cost", "-1"), "--cost"),
        ("--cost inf", ("--alpha", "0.8", "--cost", "inf"), "--cost"),
        ("--cost 0.5 --costs FILE", ("--alpha", "0.8", "--cost", "0.5", "--costs", costs), "--cost"),
        ("--costs missing", ("--alpha", "0.8", "--costs", missing), "missing.txt"),
        ("--costs bad", ("--alpha", "0.8", "--costs", badcosts), "badcosts"),
        ("--costs empty", ("--alpha", "0.8", "--costs", empty), "empty.txt"),
        ("--gamma-max 0", ("--alpha", "0.8", "--gamma-max", "0"), "--gamma-max"),
        ("--gamma-max -3", ("--alpha", "0.8", "--gamma-max", "-3"), "--gamma-max"),
        ("--gamma-max 10**9", ("--alpha", "0.8", "--gamma-max", str(10**9)), "--gamma-max"),
        ("--gamma-max 2.5", ("--alpha", "0.8", "--gamma-max", "2.5"), "--gamma-max"),
        ("--plot missing dir", ("--alpha", "0.8", "--plot", nodir), "--plot"),
        ("--plot into a file's child", ("--alpha", "0.8", "--plot", os.path.join(a_file, "x.png")), "--plot"),
    ):
        case("cli speedup", d, cli("speedup", *argv), err(name))
    # generate (the shipped demo pair; errors must come before any model loads)
    case("cli generate", "valid --json", cli("generate", "def f():", "--max-new-tokens", "2", "--json", "--seed", "0"),
         ok(timeout=60))
    case("cli generate", "valid greedy prompt lookup",
         cli("generate", "def f():", "--max-new-tokens", "2", "--temperature", "0", "--prompt-lookup", "--json"), ok())
    for d, argv, name in (
        ("empty prompt", ("", "def f():"), "PROMPT"),
        ("only empty prompt", ("",), "PROMPT"),
        ("--temperature nan", ("x", "--temperature", "nan"), "--temperature"),
        ("--temperature -1", ("x", "--temperature", "-1"), "--temperature"),
        ("--temperature inf", ("x", "--temperature", "inf"), "--temperature"),
        ("--top-k -1", ("x", "--top-k", "-1"), "--top-k"),
        ("--top-p 1.5", ("x", "--top-p", "1.5"), "--top-p"),
        ("--top-p nan", ("x", "--top-p", "nan"), "--top-p"),
        ("--max-new-tokens -1", ("x", "--max-new-tokens", "-1"), "--max-new-tokens"),
        ("--max-new-tokens 10**6", ("x", "--max-new-tokens", str(10**6)), "--max-new-tokens"),
        ("--gamma 0", ("x", "--gamma", "0"), "--gamma"), ("--gamma abc", ("x", "--gamma", "abc"), "--gamma"),
        ("--ngram 0", ("x", "--prompt-lookup", "--ngram", "0"), "--ngram"),
        ("--device cuda", ("x", "--device", "cuda"), "--device"),
        ("--device nonsense", ("x", "--device", "nonsense"), "--device"),
        ("--seed 2**64", ("x", "--seed", str(2**64)), "--seed"),
        ("--seed abc", ("x", "--seed", "abc"), "--seed"),
        ("--target missing", ("x", "--target", missing, "--draft", missing), "missing.txt"),
        ("--target without --draft", ("x", "--target", missing), "--draft"),
        ("--draft without --target", ("x", "--draft", missing), "--target"),
        ("--prompt-lookup with --draft", ("x", "--prompt-lookup", "--draft", missing), "--prompt-lookup"),
        ("--method bad", ("x", "--method", "fast"), "--method"),
    ):
        case("cli generate", d, cli("generate", *argv), err(name))
    # demo
    case("cli demo", "valid", cli("demo", "--prompts", "1", "--max-new-tokens", "2", "--json"), ok(timeout=120))
    for d, argv, name in (
        ("--prompts 0", ("--prompts", "0"), "--prompts"),
        ("--prompts 1000", ("--prompts", "1000", "--max-new-tokens", "1"), "--prompts"),
        ("--threads 0", ("--threads", "0"), "--threads"), ("--threads -2", ("--threads", "-2"), "--threads"),
        ("--gamma 0", ("--gamma", "0"), "--gamma"), ("--temperature nan", ("--temperature", "nan"), "--temperature"),
        ("--temperature -1", ("--temperature", "-1"), "--temperature"),
        ("--max-new-tokens 0", ("--max-new-tokens", "0"), "--max-new-tokens"),
        ("--max-new-tokens 10**6", ("--max-new-tokens", str(10**6)), "--max-new-tokens"),
        ("--seed 2**64", ("--seed", str(2**64)), "--seed"),
        ("--method greedy", ("--method", "greedy"), "--method"),
    ):
        case("cli demo", d, cli("demo", *argv), err(name))
    # bench (never run in full here: every case must fail before the benchmark starts)
    for d, argv, name in (
        ("--threads 0", ("--threads", "0"), "--threads"),
        ("--prompts missing", ("--prompts", missing), "--prompts"),
        ("--prompts empty", ("--prompts", empty), "--prompts"),
        ("--num-prompts 0", ("--num-prompts", "0"), "--num-prompts"),
        ("--repeats 0", ("--repeats", "0"), "--repeats"),
        ("--gamma 0", ("--gamma", "0"), "--gamma"),
        ("--temperature nan", ("--temperature", "nan"), "--temperature"),
        ("--batch-size 0", ("--batch-size", "0"), "--batch-size"),
        ("--target without --draft", ("--target", missing), "--draft"),
        ("--out is a file", ("--out", a_file), "--out"),
        ("--systems nomatch", ("--systems", "nomatch"), "--systems"),
        ("--max-new-tokens 0", ("--max-new-tokens", "0"), "--max-new-tokens"),
        ("--seed 2**64", ("--seed", str(2**64)), "--seed"),
    ):
        case("cli bench", d, cli("bench", *argv), err(name))


# ---------------------------------------------------------------------------------------------- main
def build(tmp):
    sampling_cases()
    verify_cases()
    candidates_cases()
    speedup_cases()
    acceptance_cases()
    costmodel_cases(tmp)
    generator_cases()
    demo_explain_cases()
    cli_cases(tmp)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verbose", "-v", action="store_true", help="print every case, not only the failures")
    ap.add_argument("--only", help="run only groups containing this substring")
    ap.add_argument("--json", help="write the per-case results to this JSON file")
    args = ap.parse_args(argv)
    import warnings

    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        build(tmp)
        results = []
        for group, desc, fn, exp in CASES:
            if args.only and args.only not in group:
                continue
            cls, detail = classify(fn, exp)
            results.append({"group": group, "case": desc, "class": cls, "detail": detail})
    counts = Counter(r["class"] for r in results)
    for r in results:
        if args.verbose or r["class"] in ("silent", "unhelpful"):
            print(f"[{r['class']:9}] {r['group']}: {r['case']}  ->  {r['detail']}")
    by_group = Counter((r["group"].split(" ")[0] if r["group"].startswith("cli") else "api") for r in results)
    print(f"\n{len(results)} cases ({by_group['api']} API, {by_group['cli']} CLI) in {time.time() - t0:.0f} s: "
          + ", ".join(f"{k} {counts.get(k, 0)}" for k in ("clear", "valid", "silent", "unhelpful")))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"counts": dict(counts), "results": results}, fh, indent=1)
    return 0 if counts.get("silent", 0) == 0 and counts.get("unhelpful", 0) <= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
