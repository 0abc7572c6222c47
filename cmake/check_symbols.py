#!/usr/bin/env python3
"""Fails when an object file of the library calls or reads a symbol defined in a higher layer.

check_layers.cmake reads includes; this reads what the objects link to, so that a call through a
declaration kept in a lower layer (a function declared in core but defined in methods) fails too.
The layers and their ranks are check_layers.cmake's `set(rank_<module> N)` lines. Run by the build
after the static library is archived:

    check_symbols.py --nm NM --layers cmake/check_layers.cmake OBJECT...

An object's module is the folder after `src/` in its path (CMake mirrors the source tree under
`<target>.dir/`). Only strong definitions count: weak and unique symbols (inline functions,
templates) are compiled into every user, so they bind no layer to another.
"""
import argparse
import re
import subprocess
import sys
from collections import defaultdict

STRONG = set("TDBRG")  # text, data, bss, read-only, small data: one definition that users link to


def read_ranks(path):
    ranks = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s*set\(rank_([a-z_]+)\s+(\d+)\)", line)
            if m:
                ranks[m.group(1)] = int(m.group(2))
    if not ranks:
        sys.exit(f"check_symbols: no rank_<module> lines in {path}")
    return ranks


def module_of(path):
    m = re.search(r"/src/([a-z_]+)/[^/]+\.o(bj)?$", path)
    return m.group(1) if m else None


def source_of(path):
    m = re.search(r"/(src/[a-z_]+/[^/]+)\.o(bj)?$", path)
    return m.group(1) if m else path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nm", default="nm")
    parser.add_argument("--layers", required=True, help="cmake/check_layers.cmake")
    parser.add_argument("objects", nargs="+")
    args = parser.parse_args()
    ranks = read_ranks(args.layers)

    objects = [o for o in args.objects if module_of(o)]
    if not objects:
        sys.exit("check_symbols: no object file under a src/<module>/ folder among the arguments")
    unknown = sorted({module_of(o) for o in objects} - ranks.keys())
    if unknown:
        sys.exit(f"check_symbols: folders without a layer in {args.layers}: {', '.join(unknown)}")

    # One nm over every object: "object: symbol type [value size]".
    out = subprocess.run([args.nm, "-P", "-A", *objects], check=True, capture_output=True, text=True).stdout
    defined_in = {}
    wanted = defaultdict(set)
    for line in out.splitlines():
        head, _, rest = line.rpartition(": ")
        fields = rest.split()
        if len(fields) < 2:
            continue
        symbol, kind = fields[0], fields[1]
        if kind == "U":
            wanted[head].add(symbol)
        elif kind in STRONG:
            defined_in[symbol] = head

    errors = []
    for obj, symbols in wanted.items():
        rank = ranks[module_of(obj)]
        for symbol in symbols:
            owner = defined_in.get(symbol)
            if owner and ranks[module_of(owner)] > rank:
                errors.append((source_of(obj), module_of(obj), symbol, source_of(owner), module_of(owner)))
    if not errors:
        return 0
    names = subprocess.run(["c++filt"], input="\n".join(e[2] for e in errors), capture_output=True,
                           text=True).stdout.splitlines()
    print("Layering broken: an object uses a symbol defined in a higher layer "
          "(layers: cmake/check_layers.cmake)", file=sys.stderr)
    for (src, mod, symbol, owner, owner_mod), name in sorted(zip(errors, names or [e[2] for e in errors])):
        print(f"  {src} ({mod}) uses {name or symbol}, defined in {owner} ({owner_mod})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
