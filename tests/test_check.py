"""sdtgen check: every site is where the image's table says, or exit 1 naming it."""

from __future__ import annotations

import json
import shutil

from helpers import corrupt_site_entry, final_link, sdtgen


def test_check_passes_on_the_fixture_image(kernel):
    proc = sdtgen("check", kernel.partial, kernel.image)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{kernel.image}: 21 sites (table mode reloc): 21 stable, 0 moved, 0 missing"
    report = json.loads(sdtgen("check", kernel.partial, kernel.image, "--json").stdout)
    assert report["ok"] and report["stable"] == 21
    assert all(s["address"] == s["actual"] for s in report["sites"])


def test_check_quiet_prints_nothing_when_stable(kernel):
    proc = sdtgen("check", "--quiet", kernel.partial, kernel.image)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""


def test_offset_mode_holds_when_the_final_link_keeps_text_in_place(kernel_offset):
    assert sdtgen("check", kernel_offset.partial, kernel_offset.image).returncode == 0


def test_check_fails_on_a_corrupted_table_entry(kernel, tmp_path):
    image = corrupt_site_entry(kernel.image, tmp_path / "corrupt.elf", 6, 3)
    proc = sdtgen("check", kernel.partial, image)
    assert proc.returncode == 1
    sites = json.loads(sdtgen("scan", kernel.partial, "--json").stdout)["sites"]
    bad = sites[6]
    assert f"{bad['probe']} at {bad['function']}: moved by -0x3" in proc.stderr
    assert "to fix: the table is corrupt: rerun `sdtgen gen` and relink" in proc.stderr
    report = json.loads(sdtgen("check", kernel.partial, image, "--json").stdout)
    assert [s["status"] for s in report["sites"]].count("moved") == 1 and not report["ok"]


def test_check_fails_in_offset_mode_when_text_moved_after_the_partial_link(kernel_offset, tmp_path):
    """The open question of the 2015 design: stubs linked first shift every site."""
    partial = tmp_path / "kernel.o"
    shutil.copy(kernel_offset.partial, partial)
    image = final_link(tmp_path, partial, mode="offset", order="stubs-first")
    proc = sdtgen("check", partial, image)
    assert proc.returncode == 1
    report = json.loads(sdtgen("check", partial, image, "--json").stdout)
    deltas = {s["delta"] for s in report["sites"]}
    assert report["moved"] == 21 and len(deltas) == 1 and deltas.pop() > 0
    assert "offset mode cannot follow" in proc.stderr and "use --mode reloc" in proc.stderr
    assert "... and 1 more sites (all of them with --json)" in proc.stderr  # 21 moved, 20 shown
    assert "hk:proc:exit:done at proc_exit+0x" in proc.stderr


def test_reloc_mode_survives_the_same_reordering(kernel, tmp_path):
    partial = tmp_path / "kernel.o"
    shutil.copy(kernel.partial, partial)
    image = final_link(tmp_path, partial, mode="reloc", order="stubs-first")
    assert sdtgen("check", partial, image).returncode == 0


def test_check_rejects_a_table_from_another_object(kernel, tmp_path):
    from helpers import compile_c, partial_link

    other = partial_link(tmp_path, "other", compile_c(tmp_path, "o", "int f(void) { return 1; }\n"))
    proc = sdtgen("check", other, kernel.image)
    assert proc.returncode == 1 and "has 21 site entries but" in proc.stderr


def test_check_on_an_image_without_tables(tmp_path):
    from helpers import compile_c, run

    obj = compile_c(tmp_path, "plain", "int kmain(void) { return 0; }\n")
    image = tmp_path / "plain.elf"
    run(["ld", "-e", "kmain", "-o", str(image), str(obj)])
    proc = sdtgen("check", obj, image)
    assert proc.returncode == 2
    assert "has no set_sdt_sites_set linker set" in proc.stderr and "sdtgen gen" in proc.stderr
