"""The control protocol's reply lines come from one table, sdtgen/layout.py's REPLIES: the C core writes each line
by its SDT_REPLY_* and puts each field at its SDT_FIELD_*, the hosted main's C reader (sdt_linux_main.c) and the
host's parse_reply read them by the same. So a table with its fields in another order, rendered into the header
a process is built with, still gives the same answers through both readers, and a line written by one table does
not read by the other: no side reads a reply by a word position of its own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT, SDTGEN, run
from runtime_support import include_dir

from sdtgen import layout
from sdtgen.layout import VALUES, WORD
from sdtgen.transport.frames import TEXT, Frame, FrameReader

PROCESS = ROOT / "fixtures" / "process"
REVERSED = {("hello", "hello"), ("run", "return"), ("run", "fault"), ("torture", "torture")}  # fields reversed


def reversed_table() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    return tuple((c, w, tuple(reversed(f)) if (c, w) in REVERSED else f) for c, w, f in layout.REPLIES)


def parse(table, command: str, line: str):
    """parse_reply as it reads with ``table`` for REPLIES."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(layout, "REPLIES", table)
        return layout.parse_reply(command, line)


def build(out: Path, table) -> Path:
    """kernel-proc built against the installed headers, sdt_runtime.h rendered from ``table``."""
    inc = out / "include"
    shutil.copytree(include_dir(), inc)
    header = inc / "sdt_runtime.h"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(layout, "REPLIES", table)
        text = header.read_text()
        header.write_text(text.replace(layout.current_block(text), layout.render_c()))
    run(["make", "-C", str(PROCESS), f"O={out}", f"SDTGEN={SDTGEN}", f"SDT_INCLUDE={inc}"])
    return out / "kernel-proc"


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """(the table, kernel-proc built by it) for the table as it is and for one with four lines' fields reversed."""
    return [(table, build(tmp_path_factory.mktemp(name), table))
            for name, table in (("as-is", layout.REPLIES), ("reversed", reversed_table()))]


def said_lines(exe: Path, *args: str, stdin: str = "") -> list[str]:
    """The text frames a process says with --control, ``stdin`` its command lines."""
    out = subprocess.run([str(exe), *args, "--control"], input=stdin.encode(), capture_output=True, timeout=60,
                         check=True).stdout
    return [f.payload.decode() for f in FrameReader().feed(out) if isinstance(f, Frame) and f.type == TEXT]


def events(exe: Path, *commands: str) -> list[dict]:
    out = run([str(exe), "--cpus", "2", "--consumer", "none", *commands]).stdout
    return [json.loads(x) for x in out.splitlines() if x.startswith("{")]


def test_a_hello_line_reads_by_the_table_that_wrote_it_and_by_no_other(builds):
    (table, as_is), (other, flipped) = builds
    lines = {exe: next(x for x in said_lines(exe, "--cpus", "3") if x.startswith(WORD["hello"] + " "))
             for exe in (as_is, flipped)}
    read = []
    for exe, own, foreign in ((as_is, table, other), (flipped, other, table)):
        word, v = parse(own, "hello", lines[exe])
        assert (word, v["arch"], v["cpus"], v["protocol"], v["version"]) == \
            ("hello", "x86_64", 3, "safe", VALUES["SDT_CONTROL_VERSION"])
        assert parse(foreign, "hello", lines[exe]) is None
        read.append({k: x for k, x in v.items() if k != "entries"})  # where the image is: ASLR moves it
    assert read[0] == read[1]


def test_the_hosted_mains_reader_follows_the_table_its_runtime_was_built_with(builds):
    """Run and torture through each build: the same return value and the same torture counts the toggles fix,
    read by the C reader from lines whose fields stand in the other order."""
    seen = []
    for _, exe in builds:
        got = events(exe, "run", "kmain,3", "torture", "kmain,1", ":::", "40")
        (ret,) = [e for e in got if e["event"] == "return"]
        (t,) = [e for e in got if e["event"] == "torture"]
        assert (t["protocol"], t["cpus"], t["toggles"], t["faults"], t["torn"], t["leaked"]) == \
            ("safe", 2, 40, 0, 0, 0)
        assert t["calls"] > 0 and 0 < t["windows"] <= 40, t
        seen.append((ret["cpu"], ret["value"]))
    assert seen[0] == seen[1] and seen[0][0] == 0, seen


def test_an_error_reply_reads_its_code_and_command_by_the_table(builds):
    (table, exe), _ = builds
    lines = said_lines(exe, stdin="nosuch 1 2\nmode bogus\nrun 7 0 0\n")
    errors = [parse(table, "", x) for x in lines if x.startswith(WORD["error"] + " ")]
    assert [(w, v["code"], v["command"]) for w, v in errors] == [
        ("error", VALUES["SDT_ERR_UNKNOWN"], "nosuch"), ("error", VALUES["SDT_ERR_USAGE"], "mode"),
        ("error", VALUES["SDT_ERR_CPU"], "run")], lines
    assert all(v["text"] for _, v in errors)
