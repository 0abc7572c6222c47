"""Callers ask a component's record what it can do (PolicyInfo::keeps_every_row,
holds_prompt_until_end, AllocatorInfo::unbounded, measures) instead of comparing its name: a new
policy or allocator that behaves like an existing one then gets the right answer everywhere. This
reads the sources for a resolved policy's or allocator's name, or a record's id, compared with a
literal."""
import re

from conftest import ROOT

PATTERNS = [
    re.compile(r"resolved_(policy|allocator)\([^()]*\)\s*[!=]=\s*\""),
    re.compile(r"\"\s*[!=]=\s*resolved_(policy|allocator)\("),
    re.compile(r"\bid\s*[!=]=\s*\""),
    re.compile(r"\.resolved_(policy|allocator)\s*[!=]=\s*[\"']"),
]


def test_no_component_name_is_compared_with_a_literal():
    found = []
    for folder in ("src", "include", "python"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".cc", ".h", ".py"):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if any(p.search(line) for p in PATTERNS):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "compare a capability on the record, not a name:\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for():
    samples = ['if (resolved_policy(config) == "full") return;', 'if (p.id != "full") {',
               'x = native_config.resolved_allocator != "squeeze"']
    for s in samples:
        assert any(p.search(s) for p in PATTERNS), s
    assert not any(p.search('if (keeps_every_row(config)) return;') for p in PATTERNS)


def test_the_cache_core_is_built_from_resolved_parts():
    """src/cache/ builds layers from methods/cache_parts.h's resolved parts: it never includes the
    registry, so it cannot look a method, policy or allocator up by name."""
    found = []
    for path in sorted((ROOT / "src" / "cache").rglob("*")) + sorted((ROOT / "include/squeezekv/cache").rglob("*")):
        if path.suffix in (".cc", ".h") and '#include "squeezekv/methods/registry.h"' in path.read_text(encoding="utf-8"):
            found.append(str(path.relative_to(ROOT)))
    assert not found, "build the cache from resolve_cache_parts, not the registry:\n" + "\n".join(found)
