"""Small writers shared by the sections of docs/results.md: numbers, cells, provenance lines."""
import re


def pct(v):
    return f"{v:g} %"


def kl(v):
    return "0" if v == 0 else f"{v:.4f}"


def found(f, of):
    return f"{f} of {of}"


def span(values, fmt):
    """'a' or 'a-b' (lowest to highest)."""
    lo, hi = min(values), max(values)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}-{fmt(hi)}"


def listing(items):
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def shares_text(shares):
    return listing(f"{s:g}" for s in shares) + " %" if shares else "no share"


def cpu_short(cpu):
    """'2-core AMD EPYC (lscpu: "AMD EPYC", CPU family 26, ...)' -> '2-core AMD EPYC, family 26'."""
    name = cpu.split(" (")[0]
    family = re.search(r"CPU family (\d+)", cpu)
    return f"{name}, family {family.group(1)}" if family else name


def notes_links(docs):
    """Links (from docs/) to the notes sections the data files name (docs/notes/F.md#A ...), each
    labelled with its file and the first words of its section."""
    links = []
    for doc in docs:
        for part in doc["source"].split("; "):
            path = part.split(" (")[0].strip()
            if not path.startswith("docs/notes/"):
                continue
            target = path[len("docs/"):]
            name, _, anchor = target.partition("#")
            words = re.split(r"-?\d{4}-\d\d-\d\d", anchor)[0].split("-")
            label = name[len("notes/"):-len(".md")] + (": " + " ".join(words[:6]) if anchor else "")
            link = f"[{label}]({target})"
            if link not in links:
                links.append(link)
    return ", ".join(links)


def provenance(docs):
    """Where a section's figures come from: each data file (CPU, sitting) and the notes."""
    files = [f"[{d['file']}](data/{d['file']}) ({cpu_short(d['cpu'])}; {d['sitting']})" for d in docs]
    return "Data: " + "; ".join(files) + ". Notes with the commands: " + notes_links(docs) + "."


def table(head, rows, align=None):
    """Markdown table lines; align: one of 'l'/'r' per column (default: first left, rest right)."""
    align = align or ["l"] + ["r"] * (len(head) - 1)
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" if a == "l" else "---:" for a in align) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def para(*parts):
    """One paragraph, one line of the page (however long), from the pieces of its text."""
    return "".join(parts)
