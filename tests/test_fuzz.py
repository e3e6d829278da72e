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
