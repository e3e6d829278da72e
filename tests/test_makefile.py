"""The Makefile fragment: Kbuild-style output, V=1, and only needed rebuilds; and the project's own
make targets."""

from __future__ import annotations

import os
import re
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


SERIAL_KERNEL = r"""
#include <sdt.h>
#include <sdt_runtime.h>

SDT_PROVIDER_DEFINE(sk);
SDT_PROBE_DEFINE1(sk, , , tick, "int");

static void put(const void *data, unsigned long len) { (void)data; (void)len; }

int kmain(int n)
{
	static struct sdt_cpu cpu;
	SDT_PROBE1(sk, , , tick, n);
	sdt_serial_info(put);
	sdt_serial_frame(put, SDT_FRAME_TEXT, "hello", 5);
	return sdt_serial_drain(&cpu, put);
}
"""


def user_kernel(tmp_path, source: str, *lines: str):
    """A kernel of one C file whose Makefile is the fragment's defaults and nothing else of sdtgen's."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.c").write_text(source)
    (src / "Makefile").write_text(
        "include $(shell $(SDTGEN) makefile)\n"
        "CFLAGS := -ffreestanding -fno-pic -O2 -mcmodel=kernel -mno-red-zone -fno-stack-protector "
        "-fno-asynchronous-unwind-tables -I$(SDT_INCLUDE)\n"
        "all: build/kernel.elf\n"
        "build/main.o: main.c\n\t@mkdir -p build\n\t$(CC) $(CFLAGS) -c -o $@ $<\n"
        "$(eval $(call sdt_image,build/kernel.elf,build/kernel.o,build/main.o))\n"
        + "".join(f"{ln}\n" for ln in lines))
    return src


def test_a_kernel_that_calls_the_serial_transport_links_with_the_fragments_defaults(tmp_path):
    """sdt_runtime.h declares sdt_serial_*: the fragment builds sdt_serial.c, so a port that follows the
    guide's serial section links, and `SDT_RUNTIME_DIR` names the sources' directory."""
    src = user_kernel(tmp_path, SERIAL_KERNEL, "print-dir: ; @echo $(SDT_RUNTIME_DIR)")
    run(["make", "-C", str(src), f"SDTGEN={SDTGEN}"])
    symbols = run(["nm", str(src / "build" / "kernel.elf")]).stdout
    assert all(f" T sdt_serial_{f}\n" in symbols for f in ("frame", "info", "drain")), symbols
    printed = run(["make", "-C", str(src), "-s", "--no-print-directory", f"SDTGEN={SDTGEN}", "print-dir"]).stdout
    assert printed.strip() == run([SDTGEN, "runtime-dir"]).stdout.strip()


def test_a_runtime_part_the_image_never_calls_costs_it_nothing(tmp_path):
    """The fixture calls neither sdt_serial_* nor the control core: its image is byte for byte the one built
    with sdt_runtime.c alone (the final link takes from the runtime's archive only what the image uses), and
    nm finds none of them."""
    make(tmp_path / "default")
    core = run([SDTGEN, "runtime-dir"]).stdout.strip() + "/sdt_runtime.c"
    make(tmp_path / "core", f"SDT_RUNTIME_SRCS={core}")
    assert (tmp_path / "default" / "kernel_sdt_rt_sdt_serial.o").exists()
    assert (tmp_path / "default" / "kernel_sdt_rt_sdt_control.o").exists()
    default = (tmp_path / "default" / "kernel.elf").read_bytes()
    assert default == (tmp_path / "core" / "kernel.elf").read_bytes()
    symbols = run(["nm", str(tmp_path / "default" / "kernel.elf")]).stdout
    assert "sdt_serial" not in symbols and "sdt_control" not in symbols
    assert " sdt_init" in run(["nm", str(tmp_path / "default" / "kernel.elf")]).stdout


def _collected(*paths: str) -> int:
    """How many tests pytest collects from ``paths`` (the whole suite when none)."""
    import sys

    out = run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths],
              cwd=ROOT).stdout
    return int(re.search(r"^(\d+) tests? collected", out, re.M)[1])


def test_make_quick_runs_ruff_and_a_real_subset_of_the_suite_the_readme_names():
    """`make quick`, as make itself expands it: ruff, then pytest on test files that exist, fewer tests than the
    whole suite and more than none; the README says how long `make test` takes and names the subset."""
    dry = run(["make", "-C", str(ROOT), "--no-print-directory", "-n", "-o", ".venv/.installed", "quick"]).stdout
    commands = [shlex.split(ln) for ln in dry.splitlines()]
    assert any(c[0].endswith("/ruff") and c[1] == "check" for c in commands)
    (pytest,) = [c for c in commands if c[0].endswith("/pytest")]
    files = [w for w in pytest if w.endswith(".py")]
    assert files and [f for f in files if not (ROOT / f).is_file()] == []
    assert 0 < _collected(*files) < _collected()
    readme = (ROOT / "README.md").read_text()
    assert "make quick" in readme and re.search(r"make test .*about \d+ minutes", readme)


def test_a_runtime_source_listed_twice_builds_once_without_a_warning(tmp_path):
    """A port that adds sdt_serial.c to the defaults (as an older guide said), and names the control core
    through another spelling of its path, gets one rule each: make says no "overriding recipe", and the
    image is the defaults' byte for byte."""
    make(tmp_path / "default")
    rt = run([SDTGEN, "runtime-dir"]).stdout.strip()
    twice = make(tmp_path / "twice",
                 f"SDT_RUNTIME_SRCS={rt}/sdt_runtime.c {rt}/sdt_serial.c {rt}/sdt_control.c {rt}/sdt_serial.c "
                 f"{rt}/arch/../sdt_control.c")
    assert "overriding recipe" not in twice.stderr and "ignoring old recipe" not in twice.stderr, twice.stderr
    assert twice.stdout.count("_sdt_rt_sdt_serial.o") == 1, twice.stdout
    assert (tmp_path / "twice" / "kernel.elf").read_bytes() == (tmp_path / "default" / "kernel.elf").read_bytes()


def test_two_runtime_sources_of_one_name_stop_the_build_naming_both(tmp_path):
    """Both would compile to one object, one silently lost: the fragment refuses the list."""
    rt = run([SDTGEN, "runtime-dir"]).stdout.strip()
    mine = tmp_path / "mine" / "sdt_serial.c"
    mine.parent.mkdir()
    mine.write_text("int my_serial;\n")
    proc = run(["make", "-C", str(FIXTURE), f"O={tmp_path}/out", f"SDTGEN={SDTGEN}", "--no-print-directory",
                f"SDT_RUNTIME_SRCS={rt}/sdt_runtime.c {rt}/sdt_serial.c {mine}"], check=False)
    assert proc.returncode != 0
    assert "SDT_RUNTIME_SRCS names two files called sdt_serial.c" in proc.stderr and str(mine) in proc.stderr
