"""The three worked examples are pointed at one way: the porting guide's table names each with what it shows and
the test that builds it, every example's own header points at that table, and the pages that cite an example
link it."""

from __future__ import annotations

import re

from helpers import ROOT

DOCS = ROOT / "docs"
TABLE = "runtime.md#the-worked-examples"
# example directory -> its file that introduces it (its header comment), and the test the table must name
EXAMPLES = {
    "fixtures/porting": ("Makefile", "tests/runtime/test_guide.py"),
    "examples/tinyk": ("kernel.c", "tests/targets/test_any_kernel.py"),
    "fixtures/process": ("Makefile", "tests/runtime/test_process.py"),
}


def worked_examples_table() -> dict[str, str]:
    text = (DOCS / "runtime.md").read_text()
    section = text.split("### The worked examples\n", 1)[1].split("\n#", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| [`")]
    return {re.match(r"\| \[`([^`]+)`\]", ln)[1]: ln for ln in rows}


def test_the_guide_lists_each_example_once_with_what_it_shows_and_its_test():
    table = worked_examples_table()
    assert sorted(table) == sorted(EXAMPLES)
    for example, (_, test) in EXAMPLES.items():
        assert (ROOT / example).is_dir() and (ROOT / test).is_file()
        assert f"(../{example})" in table[example] and f"`{test}`" in table[example]


def test_each_example_points_at_the_guides_table():
    for example, (intro, _) in EXAMPLES.items():
        head = (ROOT / example / intro).read_text()[:2000]
        assert f"docs/{TABLE}" in head, f"{example}/{intro} does not point at docs/{TABLE}"
        assert "walks through it" not in head


def test_every_page_that_names_an_example_links_the_table():
    for doc in ("control.md", "qemu.md"):
        text = (DOCS / doc).read_text()
        assert any(e in text for e in EXAMPLES), doc
        assert f"]({TABLE})" in text, f"{doc} names an example without linking {TABLE}"
