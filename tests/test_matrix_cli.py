"""sdtgen matrix from the command line: filters, JSON, and the document block it rewrites."""

from __future__ import annotations

import json

from helpers import ARCHES, FIXTURE, need_tool, sdtgen


def test_one_cell_as_json(tmp_path):
    proc = sdtgen("matrix", "--mode", "stubs-first", "--compiler", "gcc", "--toolchain", "gcc:bfd/bfd", "--json")
    assert proc.returncode == 0, proc.stderr
    (cell,) = json.loads(proc.stdout)["cells"]
    assert (cell["row"], cell["column"], cell["state"]) == ("stubs-first", "gcc bfd/bfd", "done")
    assert cell["results"]["reloc"]["status"] == "ok" and cell["results"]["offset"]["status"] == "broken"


def test_output_block_is_rewritten_in_place(tmp_path):
    doc = tmp_path / "matrix.md"
    doc.write_text("intro\n<!-- matrix:begin -->\nOLD-TABLE\n<!-- matrix:end -->\nafter\n")
    proc = sdtgen("matrix", "--mode", "plain", "--compiler", "gcc", "--toolchain", "gcc:bfd/bfd",
                  "--toolchain", "gcc:bfd/gold", "--output", doc)
    assert proc.returncode == 0, proc.stderr
    text = doc.read_text()
    assert text.startswith("intro\n<!-- matrix:begin -->\n") and text.endswith("<!-- matrix:end -->\nafter\n")
    assert "| plain (kernel flags, one .text) | ✓ / ✓ | ✓ / ✓ |" in text and "OLD-TABLE" not in text


def test_the_generated_document_is_the_same_from_run_to_run(tmp_path):
    """Each run builds in a fresh temporary directory; the linker's messages name files in it."""
    need_tool("i686-linux-gnu-gcc", "gcc-i686-linux-gnu")
    need_tool("ld.lld", "lld")
    docs = [tmp_path / "first.md", tmp_path / "second.md"]
    for doc in docs:
        doc.write_text("<!-- matrix:begin -->\n<!-- matrix:end -->\n")
        proc = sdtgen("matrix", "--arch", "i386", "--mode", "pie", "--mode", "pic-noplt", "--compiler", "gcc",
                      "--toolchain", "gcc:lld/bfd", "--toolchain", "gcc:lld/gold", "--output", doc)
        assert proc.returncode == 0, proc.stderr
    first, second = (d.read_text() for d in docs)
    # lld's i386 PIE object is one GNU ld and gold reject, naming the file: the reasons carry a path
    assert "- final link: kernel-reloc.o: file not recognized" in first
    assert "/tmp" not in first and "sdtgen-matrix-" not in first
    # a refusal keeps its place in the object, which is the same in every run
    assert "- reloc: .text:kchecksum+0x" in first and "R_386_GOT32X" in first
    assert first == second


def test_user_sources_and_flags(tmp_path):
    need_tool("ld.lld", "lld")
    src = tmp_path / "src"
    src.mkdir()
    for f in FIXTURE.glob("*.[ch]"):
        (src / f.name).write_text(f.read_text())
    proc = sdtgen("matrix", "--sources", src, "--cflags=-O1", "--mode", "plain", "--compiler", "gcc",
                  "--toolchain", "gcc:bfd/lld", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cells"][0]["results"]["reloc"]["status"] == "ok"


def test_no_matching_cell_is_a_usage_error():
    proc = sdtgen("matrix", "--mode", "nosuch")
    assert proc.returncode == 2 and "no matrix cell matches" in proc.stderr


def test_linker_scripts_and_paths():
    for arch in ARCHES:
        final = sdtgen("linker-script", "final", "--arch", arch, check=True).stdout
        assert "btext = .;" in final and "__start_set_sdt_sites_set" in final
        path = sdtgen("linker-script", "partial", "--arch", arch, "--path", check=True).stdout.strip()
        assert path.endswith("linker_scripts/partial.ld")
    assert sdtgen("include-dir", check=True).stdout.strip().endswith("sdtgen/include")
    assert sdtgen("makefile", check=True).stdout.strip().endswith("sdtgen/data/sdtgen.mk")


def test_outside_a_checkout_matrix_says_it_needs_one(tmp_path):
    """The package alone (as pip installs it) has no fixtures/: one line, exit 2, nothing built."""
    import os
    import shutil
    import subprocess
    import sys

    from helpers import ROOT

    shutil.copytree(ROOT / "sdtgen", tmp_path / "sdtgen", ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "sdtgen", "matrix", "--mode", "plain"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "needs a source checkout" in proc.stderr and str(tmp_path / "fixtures") in proc.stderr
