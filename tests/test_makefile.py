"""The Makefile fragment: Kbuild-style output, V=1, and only needed rebuilds; and the project's own
make targets."""

from __future__ import annotations

import os
import shlex
import shutil

from helpers import FIXTURE, ROOT, SDTGEN, run


def make(out, *args: str):
    return run(["make", "-C", str(FIXTURE), f"O={out}", f"SDTGEN={SDTGEN}", "--no-print-directory", *args])


def test_quiet_output_is_kbuild_style(tmp_path):
    lines = make(tmp_path).stdout.splitlines()
    assert f"  SDTGEN  {tmp_path}/kernel.o" in lines
    assert f"  SDTCHK  {tmp_path}/kernel.elf" in lines
    assert f"  LD      {tmp_path}/kernel.elf" in lines
    assert all(ln.startswith("  ") for ln in lines), lines


def test_verbose_prints_full_commands(tmp_path):
    out = make(tmp_path, "V=1").stdout
    assert f"{SDTGEN} gen {tmp_path}/kernel.o --mode reloc --stubs {tmp_path}/kernel_sdt_stubs.c" in out
    assert f"{SDTGEN} check --quiet {tmp_path}/kernel.o {tmp_path}/kernel.elf" in out
    assert "  SDTGEN" not in out


def test_second_make_does_nothing_and_a_rebuilt_object_relinks(tmp_path):
    make(tmp_path)
    assert "Nothing to be done for 'all'" in make(tmp_path).stdout
    stubs = tmp_path / "kernel_sdt_stubs.c"
    mtime = stubs.stat().st_mtime_ns
    os.utime(tmp_path / "sched.o", (0, 0))  # older than sched.c: make rebuilds it
    lines = make(tmp_path).stdout.splitlines()
    assert f"  CC      {tmp_path}/sched.o" in lines and f"  SDTGEN  {tmp_path}/kernel.o" in lines
    assert f"  SDTCHK  {tmp_path}/kernel.elf" in lines
    assert stubs.stat().st_mtime_ns == mtime  # unchanged output is not rewritten, so not recompiled
    assert f"  CC      {tmp_path}/kernel_sdt_stubs.o" not in lines


def test_parallel_make_is_safe(tmp_path):
    make(tmp_path, "-j4")
    assert run([SDTGEN, "check", str(tmp_path / "kernel.o"), str(tmp_path / "kernel.elf")]).returncode == 0


def test_a_failing_check_fails_the_build_and_deletes_the_image(tmp_path):
    """A user's final script that puts the stubs first breaks offset mode; the build must stop."""
    script = run([SDTGEN, "linker-script", "final"]).stdout
    stubs_first = script.replace("btext = .;\n\t\t*(.text .text.*)", "btext = .;\n\t\t*(.text.sdt_stubs)\n\t\t"
                                 "*(.text .text.*)")
    assert stubs_first != script
    lds = tmp_path / "stubs-first.ld"
    lds.write_text(stubs_first)
    proc = run(["make", "-C", str(FIXTURE), f"O={tmp_path}", f"SDTGEN={SDTGEN}", "SDT_MODE=offset",
                f"SDT_FINAL_LDS={lds}"], check=False)
    assert proc.returncode != 0
    assert "offset mode cannot follow" in proc.stderr
    assert not (tmp_path / "kernel.elf").exists()
    ok = run(["make", "-C", str(FIXTURE), f"O={tmp_path}", f"SDTGEN={SDTGEN}", f"SDT_FINAL_LDS={lds}", "-B"])
    assert ok.returncode == 0 and (tmp_path / "kernel.elf").exists()  # reloc mode follows the move


def test_make_matrix_rewrites_a_document_that_has_the_markers():
    """`make matrix` must find its block (the README no longer carries the tables)."""
    dry = run(["make", "-C", str(ROOT), "--no-print-directory", "-n", "-o", ".venv/.installed", "matrix"]).stdout
    (command,) = [shlex.split(ln) for ln in dry.splitlines() if "tools/matrix.py" in ln]
    target = ROOT / command[command.index("--output") + 1]
    assert target == ROOT / "docs" / "matrix.md"
    text = target.read_text()
    assert text.count("<!-- matrix:begin -->") == text.count("<!-- matrix:end -->") == 1
    assert "<!-- matrix:begin -->" not in (ROOT / "README.md").read_text()


def test_each_arch_builds_into_its_own_directory_by_default(tmp_path):
    """`make ARCH=...` without O: one architecture's objects never stand in for another's."""
    from helpers import cross_tool

    cross_tool("i386", "gcc")
    checkout = tmp_path / "checkout"  # the fixture with what it includes, so nothing is written into the tree
    shutil.copytree(FIXTURE, checkout / "fixtures" / "kernel", ignore=shutil.ignore_patterns("build"))
    shutil.copy(ROOT / "fixtures" / "fixture.mk", checkout / "fixtures")
    shutil.copytree(ROOT / "tools", checkout / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    kernel = checkout / "fixtures" / "kernel"
    for arch in ("x86_64", "i386"):
        run(["make", "-C", str(kernel), f"SDTGEN={SDTGEN}", f"ARCH={arch}"])
    machines = {arch: run(["readelf", "-hW", str(kernel / "build" / arch / "kernel.elf")]).stdout
                for arch in ("x86_64", "i386")}
    assert "X86-64" in machines["x86_64"] and "Intel 80386" in machines["i386"]


def test_sdt_clock_hz_has_gen_write_the_ctf_metadata_beside_the_stubs(tmp_path):
    """Only when the kernel says its clock's rate (a guessed rate would mislead), and a new rate or name
    rewrites it, as Kbuild reruns a command whose flags changed; the same one does nothing."""
    make(tmp_path / "plain")
    assert not (tmp_path / "plain" / "kernel_sdt_metadata").exists()
    out = tmp_path / "clock"
    make(out, "SDT_CLOCK_HZ=24000000")
    text = (out / "kernel_sdt_metadata").read_text()
    assert text.startswith("/* CTF 1.8 */") and "\tfreq = 24000000;" in text and "hostname" not in text
    assert f"  SDTGEN  {out}/kernel.o" not in make(out, "SDT_CLOCK_HZ=24000000").stdout.splitlines()
    make(out, "SDT_CLOCK_HZ=1000000000", "SDT_CLOCK_NAME=sched_ns")
    text = (out / "kernel_sdt_metadata").read_text()
    assert "\tfreq = 1000000000;" in text and "\tname = sched_ns;" in text
