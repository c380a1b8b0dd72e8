"""`exactspec cache`: what exactspec keeps in its cache directory ($EXACTSPEC_CACHE, else ~/.cache/exactspec),
with sizes; --check compares each converted model with the sizes and checksums recorded when it was written;
--clear removes entries (all of exactspec's, or those named). See docs/cache.md."""
from __future__ import annotations

import json
import os
import sys


def register(sub) -> None:
    p = sub.add_parser("cache", help="list, check or clear what exactspec keeps in its cache directory",
                       description=__doc__)
    p.add_argument("--check", action="store_true",
                   help="check each converted model against its recorded sizes and sha256s (~0.4 s per 500 MB)")
    p.add_argument("--clear", nargs="*", metavar="NAME",
                   help="remove the named entries; with no NAME, every entry exactspec made (others are left)")
    p.add_argument("--json", action="store_true", help="print the listing as JSON")
    p.set_defaults(func=run)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"  # pragma: no cover


def run(args) -> int:
    from exactspec.backends.cachecheck import MANIFEST, cache_entries, check_dir, remove_entry
    from exactspec.backends.cachedir import cache_root

    root = cache_root()
    where = f"{root} ({'from EXACTSPEC_CACHE' if os.environ.get('EXACTSPEC_CACHE') else 'EXACTSPEC_CACHE unset: the default'})"
    if args.clear is not None:
        names = args.clear or [e["name"] for e in cache_entries(root) if e["ours"]]
        listed = {e["name"] for e in cache_entries(root)}
        for name in args.clear:  # every named entry checked before any is removed
            if name not in listed:
                raise ValueError(f"--clear: no entry {name!r} in {root} (names as `exactspec cache` lists them)")
        for name in names:
            remove_entry(root, name)
            print(f"removed {root / name}")
        left = [e["name"] for e in cache_entries(root) if not e["ours"]] if not args.clear else []
        if not names:
            print(f"nothing to clear in {where}")
        if left:
            print(f"left alone (not made by exactspec; name them to remove them): {', '.join(left)}")
        return 0
    entries = cache_entries(root)
    for e in entries:
        e["check"] = None
        if args.check and e["kind"] == "dir" and (root / e["name"] / MANIFEST).exists():
            e["check"] = check_dir(root / e["name"]) or "ok"
    damaged = [e["name"] for e in entries if e["check"] not in (None, "ok")]
    if damaged:
        print(f"exactspec cache: damaged: {', '.join(damaged)} (rebuilt on the next load, or remove it: "
              "exactspec cache --clear NAME)", file=sys.stderr)
    if args.json:
        print(json.dumps({"root": str(root), "entries": entries}, indent=1))
        return 0
    total = sum(e["bytes"] for e in entries)
    print(f"cache: {where}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {_size(total)}")
    width = max([len(e["name"]) + 1 for e in entries] + [10])
    for e in entries:
        name = e["name"] + ("/" if e["kind"] == "dir" else "")
        check = "" if e["check"] is None else f"  [{e['check']}]"
        print(f"  {name:<{width}} {_size(e['bytes']):>9}  {e['what']}{check}")
    if not entries:
        print("  (empty)")
    return 0
