"""The porting guide (docs/runtime.md) says what is true of the runtime it describes."""

from __future__ import annotations

import re

from helpers import ROOT

from sdtgen import layout

GUIDE = ROOT / "docs" / "runtime.md"


def section(heading: str) -> str:
    """The text under ``heading`` (a Markdown heading line), up to the next heading of any level."""
    text = GUIDE.read_text()
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    end = re.search(r"^#", text[start:], re.M)
    return text[start:start + end.start()] if end else text[start:]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every row of the first Markdown table in ``text``, header and rule left out."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def test_the_hook_table_names_exactly_the_fields_of_struct_sdt_hooks():
    """Every field of sdt_hooks (sdtgen/layout.py renders the struct) has a row, once; the table names nothing
    the struct lacks."""
    named = [re.match(r"\w+", name).group(0) for row in table_rows(section("### The hooks"))
             for name in re.findall(r"`([^`]+)`", row[0])]
    fields = [f.name for f in layout.HOOKS.fields]
    assert sorted(named) == sorted(fields), (set(named) ^ set(fields), named)
