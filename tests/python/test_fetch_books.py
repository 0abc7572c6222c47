"""scripts/fetch_books.py's reader of R's serialized character vectors and lazy-load databases, on
hand-made bytes (the real package is fetched by the script, not by the tests): elements in UTF-8,
latin-1 and NA, objects back to back, and refusals of what it does not read."""
import importlib.util
import struct
import zlib

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("fetch_books", ROOT / "scripts" / "fetch_books.py")
fetch_books = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fetch_books)


def header(version=3):
    out = b"X\n" + struct.pack(">iii", version, 0x040201, 0x030500)
    if version == 3:
        out += struct.pack(">i", 5) + b"UTF-8"
    return out


def charsxp(value, latin1=False):
    if value is None:
        return struct.pack(">ii", 9, -1)
    data = value.encode("latin-1" if latin1 else "utf-8")
    return struct.pack(">ii", 9 | (1 << 14 if latin1 else 1 << 15), len(data)) + data


def strsxp(values, version=3, attributes=False):
    out = header(version) + struct.pack(">ii", 16 | (0x200 if attributes else 0), len(values))
    for v in values:
        out += charsxp(*v) if isinstance(v, tuple) else charsxp(v)
    return out


def test_a_character_vector_reads_back_in_every_encoding():
    data = strsxp(["EMMA", "", "Caf\u00e9 au lait", ("na\u00efve", True), None])
    assert fetch_books.r_character_vector(data) == ["EMMA", "", "Caf\u00e9 au lait", "na\u00efve", ""]
    assert fetch_books.r_character_vector(strsxp(["a", "b"], version=2)) == ["a", "b"]


def test_other_objects_are_not_read_as_text():
    assert fetch_books.r_character_vector(strsxp(["x"], attributes=True)) is None
    ints = header() + struct.pack(">iii", 13, 1, 7)
    assert fetch_books.r_character_vector(ints) is None
    with pytest.raises(ValueError):
        fetch_books.r_character_vector(b"RDX2\n" + ints)


def test_lazy_load_objects_come_back_in_order():
    objects = [strsxp(["first", "book"]), strsxp(["second"]), header() + struct.pack(">iii", 13, 1, 7)]
    rdb = b"".join(struct.pack(">I", len(o)) + zlib.compress(o) for o in objects)
    assert list(fetch_books.r_lazy_load_objects(rdb)) == objects


def test_a_length_that_disagrees_is_refused():
    o = strsxp(["x"])
    with pytest.raises(ValueError):
        list(fetch_books.r_lazy_load_objects(struct.pack(">I", len(o) + 1) + zlib.compress(o)))
