"""Fuzzing: real objects and images with bytes flipped or cut, fed to every subcommand.

Every run must end in exit 0, 1 or 2; anything else (a traceback) fails. Seeded and bounded
for CI; `make fuzz` runs many more examples (SDTGEN_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import compile_c, final_link, partial_link
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdtgen.cli import main
from sdtgen.recorder import RECORDER_PREFIX

# The recorders' static writer (gcc may clone its functions).

EXAMPLES = int(os.environ.get("SDTGEN_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

SOURCE = """#include <sdt.h>
SDT_PROBE_DEFINE2(fz, m, f, two, "int", "const char *");
SDT_PROBE_DEFINE(fz, , , zero);
void tail(int x) { SDT_PROBE2(fz, m, f, two, x, "s"); }
int f(int x) { SDT_PROBE0(fz, , , zero); tail(x + 1); return x; }
"""


class Inputs:
    """The real object and image to damage (a short repr keeps failure reports readable)."""

    def __init__(self, partial: Path, image: Path) -> None:
        self.partial, self.obj, self.image = partial, partial.read_bytes(), image.read_bytes()

    def __repr__(self) -> str:
        return f"Inputs({self.partial.parent})"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    partial = partial_link(tmp, "kernel", compile_c(tmp, "f", SOURCE))
    return Inputs(partial, final_link(tmp, partial))


mutations = st.one_of(
    st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8),
    st.integers(0, 1 << 20).map(lambda n: [("cut", n)]),
)


def mutate(data: bytes, edits) -> bytes:
    out = bytearray(data)
    for where, value in edits:
        if where == "cut":
            return bytes(out[: value % (len(out) + 1)])
        out[where % len(out)] = value
    return bytes(out)


def run_all(argvs: list[list[str]], capsys) -> None:
    for argv in argvs:
        assert main(argv) in (0, 1, 2), argv
        capsys.readouterr()


@FUZZ
@given(edits=mutations)
def test_damaged_objects(inputs, edits, capsys):
    with tempfile.TemporaryDirectory() as d:
        obj = Path(d) / "k.o"
        obj.write_bytes(mutate(inputs.obj, edits))
        run_all([["scan", str(obj)], ["probes", str(obj)], ["scan", "--json", str(obj)],
                 ["gen", str(obj), "--stubs", f"{d}/s.c", "--table", f"{d}/t.S"]], capsys)


@FUZZ
@given(edits=mutations)
def test_damaged_images(inputs, edits, capsys):
    with tempfile.TemporaryDirectory() as d:
        image = Path(d) / "k.elf"
        image.write_bytes(mutate(inputs.image, edits))
        obj = Path(d) / "k.o"
        shutil.copy(inputs.partial, obj)
        run_all([["probes", str(image)], ["check", str(obj), str(image)],
                 ["boot", "--json", str(image)]], capsys)


# -- structured generators: section headers and symbol names ----------------------------------------

SHDR_FIELDS = {  # ELF64 section header: field -> (offset, struct format)
    "name": (0x00, "<I"), "type": (0x04, "<I"), "flags": (0x08, "<Q"), "addr": (0x10, "<Q"),
    "offset": (0x18, "<Q"), "size": (0x20, "<Q"), "link": (0x28, "<I"), "info": (0x2C, "<I"),
    "align": (0x30, "<Q"), "entsize": (0x38, "<Q"),
}
EDGES = [0, 1, 2, 3, 4, 8, 9, 18, 24, 0xFF00, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 32, 1 << 40, (1 << 63) - 1]

section_edits = st.lists(
    st.tuples(st.integers(0, 40), st.sampled_from(sorted(SHDR_FIELDS)),
              st.one_of(st.sampled_from(EDGES), st.integers(0, 1 << 20))),
    min_size=1, max_size=4)


def edit_sections(data: bytes, edits) -> bytes:
    """Set fields of section headers (index taken modulo the real count) to edge values."""
    import struct

    out = bytearray(data)
    shoff, = struct.unpack_from("<Q", out, 0x28)
    shnum, = struct.unpack_from("<H", out, 0x3C)
    for index, field, value in edits:
        off, fmt = SHDR_FIELDS[field]
        value &= (1 << (8 * struct.calcsize(fmt))) - 1
        struct.pack_into(fmt, out, shoff + (index % shnum) * 64 + off, value)
    return bytes(out)


@FUZZ
@given(edits=section_edits)
def test_edited_section_headers(inputs, edits, capsys):
    with tempfile.TemporaryDirectory() as d:
        obj, image = Path(d) / "k.o", Path(d) / "k.elf"
        obj.write_bytes(edit_sections(inputs.obj, edits))
        image.write_bytes(edit_sections(inputs.image, edits))
        run_all([["scan", str(obj)], ["probes", str(obj)], ["probes", str(image)],
                 ["check", str(obj), str(image)],
                 ["gen", str(obj), "--stubs", f"{d}/s.c", "--table", f"{d}/t.S"]], capsys)


names = st.one_of(
    st.binary(min_size=1, max_size=64).map(lambda b: b"__dtrace_sdt_" + b.replace(b"\0", b"")),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=40)
    .map(lambda t: ("__dtrace_sdt_" + t).encode()),
    st.sampled_from([b"memcpy", b"int", b"__dtrace_sdt_", b"__dtrace_sdt_a\x1b[2J\r\nsdtgen: ok\x07",
                     b"__dtrace_sdt_" + b"a" * 5000, b"__dtrace_sdt_a_b_c_d_e", b"__dtrace_sdt_x;y\n#z"]),
)


@FUZZ
@given(name=names)
def test_hostile_probe_names(inputs, name, capsys):
    """Any name: scan and probes never print a control character raw, and whatever gen writes compiles."""
    from crafted import point_probe_names
    from helpers import include_flag, run

    with tempfile.TemporaryDirectory() as d:
        obj = Path(d) / "k.o"
        point_probe_names(inputs.partial, obj, name)
        for argv in (["scan", str(obj)], ["probes", str(obj)]):
            code = main(argv)
            out = capsys.readouterr()
            assert code in (0, 2), argv
            assert not any(c in out.out + out.err for c in "\x1b\r\x07"), (argv, out)
        stubs, table = Path(d) / "s.c", Path(d) / "t.S"
        code = main(["gen", str(obj), "--stubs", str(stubs), "--table", str(table)])
        capsys.readouterr()
        assert code in (0, 2)
        if code == 0:  # the compiler and the assembler, not sdtgen, say whether the output is sound
            run(["gcc", include_flag(), "-c", "-o", f"{d}/s.o", str(stubs)])
            run(["gcc", "-c", "-o", f"{d}/t.o", str(table)])
            # Globals are what a link could take in place of another definition (the writer's own
            # functions are static, so they cannot replace anything).
            defined = [ln.split()[-1] for ln in run(["nm", "--defined-only", f"{d}/s.o"]).stdout.splitlines()
                       if ln.split()[1] in "TWDBR"]
            stubs_defined = [n.removeprefix(RECORDER_PREFIX) for n in defined]
            assert all(n.startswith("__dtrace_sdt_") and len(n) > 13 for n in stubs_defined), defined
