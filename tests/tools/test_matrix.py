"""Link modes: representative cells of the matrix (tools/matrix.py), both table modes, each boot
compared with the fixture's C run natively."""

from __future__ import annotations

import matrix
import pytest
from helpers import CROSS, FIXTURE, OTHER_ARCHES, ROOT, need_tool

ROWS = {r.key: r for r in matrix.ROWS}
FIXTURE_KERNEL = matrix.Kernel(tuple(sorted(FIXTURE.glob("*.c"))), matrix.FIXTURE_CALLS,
                               ROOT / "fixtures" / "linkmodes")
TOOLS = {"gcc": ("gcc", "gcc"), "clang": ("clang", "clang"), "bfd": ("ld", "binutils"), "gcc-r": ("gcc", "gcc"),
         "gold": ("ld.gold", "binutils"), "lld": ("ld.lld", "lld")}


def cells(tmp_path, row: str, *cols: matrix.Column, kernel: matrix.Kernel = FIXTURE_KERNEL) -> list[matrix.Cell]:
    for col in cols:
        if col.arch in CROSS:
            need_tool(*CROSS[col.arch])
        for tool in (col.compiler, col.partial, col.final):
            need_tool(*TOOLS[tool])
    r = ROWS[row]
    reference = matrix.native_reference(kernel, r, tmp_path / "native")
    out = matrix.run_group(r, list(cols), kernel, tmp_path, reference)
    assert all(c.state == "done" for c in out), [c.note for c in out]
    return out


def cell(tmp_path, row: str, compiler: str, partial: str, final: str) -> matrix.Cell:
    (c,) = cells(tmp_path, row, matrix.Column(compiler, partial, final))
    return c


def test_plain_kernel_holds_in_both_modes(tmp_path):
    c = cell(tmp_path, "plain", "gcc", "bfd", "bfd")
    for mode in ("reloc", "offset"):
        r = c.results[mode]
        assert (r.status, r.sites, r.stable, r.moved, r.missing, r.boot) == ("ok", 21, 21, 0, 0, True)


def test_stubs_first_breaks_offset_mode_only(tmp_path):
    c = cell(tmp_path, "stubs-first", "gcc", "bfd", "lld")
    assert (c.results["reloc"].status, c.results["reloc"].boot) == ("ok", True)
    off = c.results["offset"]
    assert (off.status, off.moved, off.boot) == ("broken", 21, None)  # a broken table is not booted
    assert "shifted by" in off.note


def test_linux_like_script_reorders_sections(tmp_path):
    """tools/linux-like.ld is a kernel's own script: it INCLUDEs sdtgen's two snippets."""
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


def test_large_code_model_is_refused_with_the_place_and_the_cause(tmp_path):
    c = cell(tmp_path, "large", "gcc", "bfd", "bfd")
    note = c.results["reloc"].note
    assert c.results["reloc"].status == "refused" and "absolute address load" in note and "not a call" in note
    assert "-mcmodel=large" in note


@pytest.mark.parametrize("arch", OTHER_ARCHES)
def test_other_architectures_plain_and_stubs_first(tmp_path, arch):
    (c,) = cells(tmp_path, "stubs-first", matrix.Column("gcc", "bfd", "bfd", arch))
    assert c.arch == arch
    assert (c.results["reloc"].status, c.results["reloc"].boot) == ("ok", True)
    assert c.results["offset"].status == "broken"


def test_riscv_lld_does_not_relax_so_offsets_hold(tmp_path):
    """lld 14 does not relax RISC-V calls; GNU ld does. The matrix shows both."""
    bfd, lld = cells(tmp_path, "plain", matrix.Column("gcc", "bfd", "bfd", "riscv64"),
                     matrix.Column("gcc", "bfd", "lld", "riscv64"))
    assert bfd.results["offset"].status == "broken" and "relaxed" in bfd.results["offset"].note
    assert (lld.results["offset"].status, lld.results["offset"].boot) == ("ok", True)
    assert bfd.results["reloc"].status == lld.results["reloc"].status == "ok"


def test_a_boot_that_differs_from_the_native_run_is_no_pass(tmp_path):
    """The fixture's image, compared with a native run of other calls: the firings differ, so the cell is ~."""
    import matrix_report

    other = matrix.Kernel(FIXTURE_KERNEL.sources, ("kmain 3",), FIXTURE_KERNEL.extra_dir)
    reference = matrix.native_reference(other, ROWS["plain"], tmp_path / "other")
    (c,) = matrix.run_group(ROWS["plain"], [matrix.Column("gcc", "bfd", "bfd")], FIXTURE_KERNEL, tmp_path, reference)
    assert (c.results["reloc"].status, c.results["reloc"].boot) == ("ok", False)
    assert matrix_report.cell_text(c) == "~ / ~"


def test_calls_that_fire_nothing_compare_nothing_and_are_no_pass(tmp_path):
    """kmem_init() fires no probe of the fixture natively: the table checks, the boot compared nothing."""
    import matrix_report

    quiet = matrix.Kernel(FIXTURE_KERNEL.sources, ("kmem_init:void",), None)
    reference = matrix.native_reference(quiet, ROWS["plain"], tmp_path / "native")
    assert reference.trace is None and "fire no probe" in reference.note
    (c,) = matrix.run_group(ROWS["plain"], [matrix.Column("gcc", "bfd", "bfd")], quiet, tmp_path, reference)
    assert (c.results["reloc"].status, c.results["reloc"].boot) == ("ok", None)
    assert matrix_report.cell_text(c) == "? / ?" and "fire no probe" in c.results["reloc"].note


def test_a_missing_toolchain_is_skipped_naming_the_package(monkeypatch):
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda cmd: None if cmd == "ld.lld" else real(cmd))
    out = matrix.run_matrix(FIXTURE_KERNEL, [ROWS["plain"]], [matrix.Column("gcc", "bfd", "lld")], jobs=1)
    assert [(c.state, c.note) for c in out] == [("skipped", "apt-get install lld")]
