"""Fuzzing the table readers: real objects and programs carrying USDT notes, ftrace, patchable entries
and a jump table, with bytes of those tables (and of the rest of the file) flipped or cut.

Every run of `sdtgen probes` must end in exit 0 or 2 with at most one line on stderr; a traceback fails.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import readelf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_jump import SOURCE as JUMP_SOURCE

from sdtgen.cli import main

EXAMPLES = int(os.environ.get("SDTGEN_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TABLES = (".note.stapsdt", "__mcount_loc", "__patchable_function_entries", "__jump_table",
          ".rela.note.stapsdt", ".rela__mcount_loc", ".rela__jump_table", ".symtab")
USDT = r"""
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
unsigned short fz_hit_semaphore __attribute__((section(".probes")));
int hit(int a, long b) { DTRACE_PROBE2(fz, hit, a, b); return a + (int)b; }
"""


class Target:
    def __init__(self, path: Path) -> None:
        self.path, self.data = path, path.read_bytes()
        self.spans = [(s.offset, s.size) for s in readelf.sections(path) if s.name in TABLES and s.size]

    def __repr__(self) -> str:
        return f"Target({self.path.name})"


@pytest.fixture(scope="module")
def targets(builder, sdt_include) -> list[Target]:
    b = builder("x86_64")
    jump = JUMP_SOURCE.replace("SITE", '"1: .byte 0x0f,0x1f,0x44,0x00,0x00"').replace("PTR", '".quad"') \
        .replace("KEY", '"%c0"').replace(".balign WORD", ".balign 8")
    flags = ("-fno-pic", "-pg", "-mfentry", "-mrecord-mcount", "-fpatchable-function-entry=2")
    objs = [b.obj("fz-usdt", USDT, f"-I{sdt_include}", *flags), b.obj("fz-jump", jump, *flags),
            b.obj("fz-rest", "struct key { int e; long n; } key_ext; void __fentry__(void) {}", "-fno-pic")]
    exe = b.link("fz", objs, "-no-pie", "-Wl,-e,hit")
    return [Target(objs[0]), Target(objs[1]), Target(exe)]


edits = st.lists(st.tuples(st.booleans(), st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=6)


def damage(target: Target, changes, cut: int | None) -> bytes:
    out = bytearray(target.data)
    for in_table, where, value in changes:
        if in_table and target.spans:
            off, size = target.spans[where % len(target.spans)]
            out[off + (where >> 4) % size] = value
        else:
            out[where % len(out)] = value
    return bytes(out[:cut % (len(out) + 1)]) if cut is not None else bytes(out)


@FUZZ
@given(which=st.integers(0, 2), changes=edits, cut=st.none() | st.integers(0, 1 << 20))
def test_damaged_tables_never_crash(targets, which, changes, cut, capsys):
    target = targets[which]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / target.path.name
        path.write_bytes(damage(target, changes, cut))
        for argv in (["probes", str(path)], ["probes", "--json", str(path)],
                     ["probes", str(path), "--kind", "stapsdt", "--kind", "jump"]):
            assert main(argv) in (0, 2), argv
            err = capsys.readouterr().err
            assert err.count("\n") <= 1 and "Traceback" not in err, err


def test_the_undamaged_targets_list_every_kind(targets, capsys):
    for target in targets:
        assert main(["probes", str(target.path)]) == 0
    out = capsys.readouterr().out
    assert all(provider in out for provider in ("fz", "ftrace", "patchable", "jump_label"))
