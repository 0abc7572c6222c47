#!/usr/bin/env python3
"""Fetches whole books for the long-context measurements from Debian's packages (pinned versions,
downloaded with `apt-get download`, unpacked with `dpkg-deb -x`, nothing installed), writes each as
plain UTF-8 text, checks its sha256 against the value pinned here and prints one line per book:
"NAME PATH". Never committed: they live in ${SQUEEZEKV_BOOKS:-$HOME/.cache/squeezekv/books}.

  scripts/fetch_books.py                 # kjv austen-emma austen-pride (the default set)
  scripts/fetch_books.py all             # every book below
  scripts/fetch_books.py austen-persuasion

Books (provenance and licenses: docs/models.md, "Books"):
  kjv                 the King James Bible (1611; public domain), from `bible-kjv-text` 4.38, read
                      out verse by verse with the package's own `bible` program (`bible-kjv` 4.38)
  austen-<novel>      Jane Austen's six novels (public domain), from `r-cran-janeaustenr` 1.0.0-1
                      (the text of Project Gutenberg's editions, MIT-licensed packaging), read out
                      of the R package's data file: emma, pride, persuasion, mansfield, northanger,
                      sense

A book already there with the pinned sha256 is not fetched again. Any failure is one message and
exit status 2; a file is moved to its final name only once its sha256 is right.
"""
import hashlib
import os
import re
import struct
import subprocess
import sys
import tempfile
import zlib

DEBS = {"bible-kjv-text": "4.38", "bible-kjv": "4.38", "r-cran-janeaustenr": "1.0.0-1"}

# Austen: the novel's first line in the package's data, the book name, its pinned sha256.
AUSTEN = {
    "austen-emma": ("EMMA", "7c67b5985c6d0de1efaeb5d342d52cb82c38083c40e2295129e30e87ee690ebe"),
    "austen-pride": ("PRIDE AND PREJUDICE", "dfc684d4f857fa938268f9ab9c5567b64bd0691251eca959644adeabe6287a4d"),
    "austen-persuasion": ("Persuasion", "8061549557aebd2fd6e353d18d9197cb707029112bd52d4d8b174583a925848a"),
    "austen-mansfield": ("MANSFIELD PARK", "98bc90519cdf4ef663ad7de2734bb529435ef24f7abbde6bb1a50898871dafe9"),
    "austen-northanger": ("NORTHANGER ABBEY", "51f91bbe0517db8e65cff009b097ce0a1836124c4e0532ac19e6c0cad982abed"),
    "austen-sense": ("SENSE AND SENSIBILITY", "105e1651fe93bed7130078578efd31e0c557d68667ba672ddc876f735b30fe09"),
}
SHA256 = {
    "kjv": "82a24e4e23c644fe579ed387b20e54eb529cc0a87a25e0810064edb2216780c2",
}
DEFAULT = ["kjv", "austen-emma", "austen-pride"]


def fail(message):
    print(f"fetch_books: {message}", file=sys.stderr)
    sys.exit(2)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpack_deb(package, work):
    """Downloads the pinned package (apt-get download) and unpacks it under work/root."""
    spec = f"{package}={DEBS[package]}"
    done = subprocess.run(["apt-get", "download", spec], cwd=work, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"could not download {spec} with apt-get (run 'apt-get update' first?): {done.stderr.strip()[:300]}")
    debs = [f for f in os.listdir(work) if f.startswith(package + "_") and f.endswith(".deb")]
    if len(debs) != 1:
        fail(f"apt-get download {spec} left {len(debs)} .deb files")
    root = os.path.join(work, "root")
    subprocess.run(["dpkg-deb", "-x", os.path.join(work, debs[0]), root], check=True)
    return root


# --- R's serialization format (XDR), as far as a character vector needs -----------------------
STRSXP, CHARSXP = 16, 9


def r_character_vector(data):
    """The strings of one serialized R character vector (None when the object is something else).
    Layout: "X\\n", format version, writer and reader versions (version 3 adds the native encoding),
    then the object: a flags word whose low byte is its type, its length and, for a character
    vector, each element as a CHARSXP (flags, byte length or -1 for NA, bytes)."""
    if data[:2] != b"X\n":
        raise ValueError("not an R object in XDR format")
    pos = 2
    version = struct.unpack_from(">i", data, pos)[0]
    pos += 12
    if version == 3:
        n = struct.unpack_from(">i", data, pos)[0]
        pos += 4 + n
    flags, length = struct.unpack_from(">ii", data, pos)
    pos += 8
    if flags & 0xFF != STRSXP or flags & 0x200:  # 0x200: the object has attributes
        return None
    out = []
    for _ in range(length):
        cflags, n = struct.unpack_from(">ii", data, pos)
        pos += 8
        if cflags & 0xFF != CHARSXP:
            raise ValueError(f"element of type {cflags & 0xFF} in a character vector")
        if n < 0:
            out.append("")  # NA
            continue
        # The element's encoding is in its flags' levels: bit 14 marks latin-1 (else UTF-8 or ASCII).
        out.append(data[pos:pos + n].decode("latin-1" if cflags & (1 << 14) else "utf-8"))
        pos += n
    return out


def r_lazy_load_objects(rdb):
    """Every object of an R lazy-load database (.rdb): back to back, each a big-endian 4-byte
    uncompressed length and a zlib stream."""
    pos = 0
    while pos < len(rdb):
        size = struct.unpack_from(">I", rdb, pos)[0]
        d = zlib.decompressobj()
        data = d.decompress(rdb[pos + 4:])
        if len(data) != size:
            raise ValueError(f"object at byte {pos}: {len(data)} bytes, its header says {size}")
        pos = len(rdb) - len(d.unused_data)
        yield data


def austen_texts(work):
    root = unpack_deb("r-cran-janeaustenr", work)
    path = os.path.join(root, "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb")
    with open(path, "rb") as f:
        rdb = f.read()
    texts = {}
    for data in r_lazy_load_objects(rdb):
        lines = r_character_vector(data)
        if lines:
            title = next((x for x in lines if x.strip()), "")
            texts[title.strip()] = "\n".join(lines).strip() + "\n"
    return texts


def kjv_text(work):
    data_root = unpack_deb("bible-kjv-text", work)
    prog_root = unpack_deb("bible-kjv", work)
    program = os.path.join(prog_root, "usr/bin/bible")
    # -f: one verse a line, "Ge1:1 In the beginning ...", unwrapped when COLUMNS is unset.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = subprocess.run([program, "-f", "-p", os.path.join(data_root, "usr/lib"), "gen1:1-rev22:21"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    if done.returncode != 0 or not done.stdout:
        fail(f"the bible program could not read the text (needs libreadline8): {done.stderr.strip()[:300]}")
    # "Ge1:1 In the beginning ..." -> the verse's text; a blank line before each chapter's first verse.
    out = []
    for line in done.stdout.splitlines():
        m = re.match(r"^[1-3]?[A-Za-z]+(\d+):(\d+) (.*)$", line)
        if not m:
            fail(f"unexpected line from the bible program: {line[:80]!r}")
        if m.group(2) == "1" and out:
            out.append("")
        out.append(m.group(3))
    return "\n".join(out) + "\n"


def main(argv):
    names = argv or DEFAULT
    if names == ["all"]:
        names = ["kjv"] + list(AUSTEN)
    known = ["kjv"] + list(AUSTEN)
    for name in names:
        if name not in known:
            fail(f"book '{name}' is not known (known: {', '.join(known)}, all)")
    dest = os.environ.get("SQUEEZEKV_BOOKS") or os.path.join(os.path.expanduser("~"), ".cache/squeezekv/books")
    try:
        os.makedirs(dest, exist_ok=True)
    except OSError as e:
        fail(f"cannot create the book folder '{dest}' (set SQUEEZEKV_BOOKS to a writable one): {e}")
    pinned = dict(SHA256, **{k: v[1] for k, v in AUSTEN.items()})
    missing = [n for n in names if not (os.path.isfile(os.path.join(dest, n + ".txt"))
                                        and sha256(os.path.join(dest, n + ".txt")) == pinned[n])]
    if missing:
        print(f"fetch_books: fetching {', '.join(missing)} from Debian's packages", file=sys.stderr)
        with tempfile.TemporaryDirectory(dir=dest, prefix=".fetch-") as work:
            texts = {}
            if "kjv" in missing:
                texts["kjv"] = kjv_text(work)
            if any(n.startswith("austen-") for n in missing):
                by_title = austen_texts(work)
                for n in missing:
                    if n.startswith("austen-"):
                        if AUSTEN[n][0] not in by_title:
                            fail(f"{n}: no novel titled {AUSTEN[n][0]} in r-cran-janeaustenr")
                        texts[n] = by_title[AUSTEN[n][0]]
            for n in missing:
                tmp = os.path.join(work, n + ".txt")
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(texts[n])
                got = sha256(tmp)
                if got != pinned[n]:
                    fail(f"{n}: sha256 {got}, pinned {pinned[n]} (the package changed?)")
                os.replace(tmp, os.path.join(dest, n + ".txt"))
    for n in names:
        print(f"{n} {os.path.join(dest, n + '.txt')}")


if __name__ == "__main__":
    main(sys.argv[1:])
