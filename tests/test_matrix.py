"""Link modes: representative cells of the matrix, both table modes, with the boot compared."""

from __future__ import annotations

import pytest
from helpers import FIXTURE, OTHER_ARCHES, ROOT, need_tool

from sdtgen import matrix

ROWS = {r.key: r for r in matrix.ROWS}
SOURCES = sorted(FIXTURE.glob("*.c"))
EXTRA = ROOT / "fixtures" / "linkmodes"


def cell(tmp_path, row: str, compiler: str, partial: str, final: str) -> matrix.Cell:
    for tool, package in (({"gcc": "gcc", "clang": "clang"}[compiler], compiler),
                          ({"lld": "ld.lld", "gold": "ld.gold"}.get(partial, "ld"), "lld" if partial == "lld" else
                           "binutils"),
                          ({"lld": "ld.lld", "gold": "ld.gold"}.get(final, "ld"), "lld" if final == "lld" else
                           "binutils")):
        need_tool(tool, package)
    r = ROWS[row]
    reference = matrix.reference_trace(r, SOURCES, EXTRA, tmp_path / "ref")
    (c,) = matrix.run_group(r, [matrix.Column(compiler, partial, final)], SOURCES, EXTRA, tmp_path, reference)
    assert c.state == "done", c.note
    return c


def test_plain_kernel_holds_in_both_modes(tmp_path):
    c = cell(tmp_path, "plain", "gcc", "bfd", "bfd")
    for mode in ("reloc", "offset"):
        r = c.results[mode]
        assert (r.status, r.sites, r.stable, r.moved, r.missing, r.extra, r.boot) == ("ok", 21, 21, 0, 0, 0, True)


def test_stubs_first_breaks_offset_mode_only(tmp_path):
    c = cell(tmp_path, "stubs-first", "gcc", "bfd", "lld")
    assert (c.results["reloc"].status, c.results["reloc"].boot) == ("ok", True)
    off = c.results["offset"]
    assert (off.status, off.moved, off.boot) == ("broken", 21, False)
    assert "shifted by" in off.note


def test_linux_like_script_reorders_sections(tmp_path):
    c = cell(tmp_path, "linux-layout", "gcc", "bfd", "bfd")
    assert (c.results["reloc"].status, c.results["reloc"].stable, c.results["reloc"].boot) == ("ok", 23, True)
    assert c.results["offset"].status == "refused" and "outside .text" in c.results["offset"].note


def test_icf_folds_twins_and_the_kept_copy_fires_for_both(tmp_path):
    c = cell(tmp_path, "icf", "gcc", "bfd", "lld")
    r = c.results["reloc"]
    assert (r.status, r.folded, r.stable + r.folded, r.boot) == ("ok", 1, 23, True)


def test_gc_sections_with_merged_text_holds(tmp_path):
    c = cell(tmp_path, "gc", "gcc", "bfd", "gold")
    assert c.results["reloc"].status == "ok" and c.results["reloc"].boot


def test_gcc_lto_ir_only_object_is_explained(tmp_path):
    c = cell(tmp_path, "lto-gcc-ld-r", "gcc", "bfd", "bfd")
    for mode in ("reloc", "offset"):
        assert c.results[mode].status == "refused"
        assert "compiler IR" in c.results[mode].note and "-flinker-output=nolto-rel" in c.results[mode].note


def test_gcc_lto_partial_linked_to_machine_code(tmp_path):
    c = cell(tmp_path, "lto-gcc", "gcc", "gcc-r", "bfd")
    assert c.results["reloc"].status == "ok" and c.results["reloc"].boot


@pytest.mark.parametrize("row", ["lto-clang", "lto-thin"])
def test_clang_lto_with_lld(tmp_path, row):
    c = cell(tmp_path, row, "clang", "lld", "lld")
    assert c.results["reloc"].status == "ok" and c.results["reloc"].boot


def test_got_calls_relaxed_by_the_linker_still_verify(tmp_path):
    c = cell(tmp_path, "pic-noplt", "gcc", "bfd", "bfd")
    assert c.results["reloc"].status == "ok" and c.results["reloc"].boot


def test_pie_kernel_self_relocates_and_fires(tmp_path):
    c = cell(tmp_path, "pie", "gcc", "bfd", "lld")
    assert c.results["reloc"].status == "ok" and c.results["reloc"].boot


def test_large_code_model_is_refused_with_the_place(tmp_path):
    c = cell(tmp_path, "large", "gcc", "bfd", "bfd")
    note = c.results["reloc"].note
    assert c.results["reloc"].status == "refused" and "absolute address load" in note and "not a call" in note


@pytest.mark.parametrize("arch", OTHER_ARCHES)
def test_other_architectures_plain_and_stubs_first(tmp_path, arch):
    from helpers import CROSS, need_tool

    need_tool(*CROSS[arch])
    r = ROWS["stubs-first"]
    reference = matrix.reference_trace(r, SOURCES, EXTRA, tmp_path / "ref", arch)
    (c,) = matrix.run_group(r, [matrix.Column("gcc", "bfd", "bfd", arch)], SOURCES, EXTRA, tmp_path, reference)
    assert c.state == "done" and c.arch == arch, c.note
    assert (c.results["reloc"].status, c.results["reloc"].boot) == ("ok", True)
    assert c.results["offset"].status == "broken"


def test_riscv_lld_does_not_relax_so_offsets_hold(tmp_path):
    """lld 14 does not relax RISC-V calls; GNU ld does. The matrix shows both."""
    from helpers import need_tool

    need_tool("riscv64-linux-gnu-gcc", "gcc-riscv64-linux-gnu")
    need_tool("ld.lld", "lld")
    r = ROWS["plain"]
    reference = matrix.reference_trace(r, SOURCES, EXTRA, tmp_path / "ref", "riscv64")
    cols = [matrix.Column("gcc", "bfd", "bfd", "riscv64"), matrix.Column("gcc", "bfd", "lld", "riscv64")]
    bfd, lld = matrix.run_group(r, cols, SOURCES, EXTRA, tmp_path, reference)
    assert bfd.results["offset"].status == "broken" and "relaxed" in bfd.results["offset"].note
    assert lld.results["offset"].status == "ok"
    assert bfd.results["reloc"].status == lld.results["reloc"].status == "ok"


def test_a_missing_toolchain_is_skipped_naming_the_package(monkeypatch):
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda cmd: None if cmd == "ld.lld" else real(cmd))
    rows = [ROWS["plain"]]
    cells = matrix.run_matrix(SOURCES, EXTRA, rows, [matrix.Column("gcc", "bfd", "lld")], jobs=1)
    assert [(c.state, c.note) for c in cells] == [("skipped", "apt-get install lld")]
