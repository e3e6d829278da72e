"""Bad input: one clear line naming the file, exit 2, no traceback, nothing half written."""

from __future__ import annotations

import shutil

import pytest
from helpers import assemble, compile_c, run, sdtgen

from sdtgen.cli import main

PROBED = """#include <sdt.h>
SDT_PROBE_DEFINE1(t, m, f, n, "int");
int f(int x) { SDT_PROBE1(t, m, f, n, x); return x; }
"""


def one_error_line(proc, *needles: str) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_not_elf(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    one_error_line(sdtgen("scan", path), f"{path}: error: not an ELF file")


def test_missing_file(tmp_path):
    one_error_line(sdtgen("scan", tmp_path / "nope.o"), "nope.o: error: cannot read")


def test_wrong_class(tmp_path):
    obj = compile_c(tmp_path, "k", PROBED)
    x32 = tmp_path / "x32.o"
    run(["objcopy", "-O", "elf32-x86-64", str(obj), str(x32)])
    one_error_line(sdtgen("scan", x32), "32-bit little-endian file for machine x86_64", "expected 64-bit")


def test_unknown_machine_and_wrong_endianness(tmp_path):
    obj = compile_c(tmp_path, "k", PROBED)
    data = bytearray(obj.read_bytes())
    data[18:20] = (0x1234).to_bytes(2, "little")  # crafted: no compiler makes this machine
    bad = tmp_path / "machine.o"
    bad.write_bytes(data)
    one_error_line(sdtgen("scan", bad), "unsupported machine type 4660")
    data = bytearray(obj.read_bytes())
    data[5] = 2  # claims big-endian
    bad.write_bytes(data)
    one_error_line(sdtgen("scan", bad), str(bad))


def test_executable_given_to_scan_and_object_given_as_image(kernel):
    one_error_line(sdtgen("scan", kernel.image), "is an executable, not a relocatable object", "ld -r")
    one_error_line(sdtgen("check", kernel.partial, kernel.partial), "is a relocatable object, not a linked image")


def test_unknown_relocation_type_names_type_and_site(tmp_path):
    obj = assemble(tmp_path, "gotoff", """
        .text
        .type f, @function
    f:  movabs $__dtrace_sdt_t_m_f_n@GOTOFF, %rax
        ret
        .size f, .-f
    """)
    one_error_line(sdtgen("scan", obj), "R_X86_64_GOTOFF64", "__dtrace_sdt_t_m_f_n", ".text:f+0x2")


def test_lto_ir_object_is_explained_not_reported_as_no_probes(tmp_path):
    obj = compile_c(tmp_path, "lto", PROBED, "-flto")
    one_error_line(sdtgen("scan", obj), "holds only compiler IR (LTO)", "-flinker-output=nolto-rel")


def test_usage_errors_exit_2(tmp_path):
    proc = sdtgen("gen", tmp_path / "x.o")
    assert proc.returncode == 2 and "required" in proc.stderr
    assert sdtgen("linker-script", "final", "--arch", "vax").returncode == 2


def test_every_truncation_of_an_object_is_a_clean_error(tmp_path, capsys):
    obj = compile_c(tmp_path, "k", PROBED)
    data = obj.read_bytes()
    cut = tmp_path / "cut.o"
    stubs, table = tmp_path / "s.c", tmp_path / "t.S"
    for n in range(len(data)):
        cut.write_bytes(data[:n])
        assert main(["scan", str(cut)]) == 2, n
        assert main(["gen", str(cut), "--stubs", str(stubs), "--table", str(table)]) == 2, n
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 2 and all(line.startswith(f"{cut}: error: ") for line in err), (n, err)
    assert not stubs.exists() and not table.exists()


@pytest.mark.parametrize("n", [0, 64, 1000, 4000])
def test_truncated_image(kernel, tmp_path, n):
    image = tmp_path / "cut.elf"
    image.write_bytes(kernel.image.read_bytes()[:n])
    for args in (["check", kernel.partial, image], ["probes", image]):
        proc = sdtgen(*args)
        one_error_line(proc, str(image))


def test_failed_gen_leaves_previous_outputs_intact(kernel, tmp_path):
    obj = tmp_path / "k.o"
    shutil.copy(kernel.partial, obj)
    stubs, table = tmp_path / "s.c", tmp_path / "t.S"
    sdtgen("gen", obj, "--stubs", stubs, "--table", table, check=True)
    before = (stubs.read_bytes(), table.read_bytes())
    obj.write_bytes(obj.read_bytes()[:500])
    one_error_line(sdtgen("gen", obj, "--stubs", stubs, "--table", table))
    assert (stubs.read_bytes(), table.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.o", "s.c", "t.S"]  # no temporaries left


@pytest.mark.parametrize("command", ["scan", "gen", "check", "probes"])
def test_every_argument_of_the_build_commands_says_what_it_is(command):
    import argparse

    from sdtgen.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    silent = [a.dest for a in sub.choices[command]._actions if not a.help]
    assert silent == []


def test_the_commands_built_one_at_a_time_are_the_ones_help_lists():
    """Each run builds only its own subcommand's options: the list it goes by is the parser's own."""
    import argparse

    from sdtgen.cli import COMMANDS, build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert tuple(sub.choices) == COMMANDS
    for name in COMMANDS:
        (only,) = [a for a in build_parser(name)._actions if isinstance(a, argparse._SubParsersAction)]
        assert tuple(only.choices) == (name,)


@pytest.mark.parametrize("fails", [False, True])
def test_a_scan_runs_without_the_cycle_collector_and_gives_it_back(monkeypatch, tmp_path, fails):
    """scan and probes pause the cyclic collector while they run (what they allocate has no cycles), and main
    gives it back however the command ends: sdtgen runs in-process in tests and tools."""
    import gc

    import sdtgen.scan

    seen = []

    def scan(path, prefix):
        seen.append(gc.isenabled())
        if fails:
            raise sdtgen.scan.SdtError(path, "is refused here", "nothing")
        from sdtgen.arch import by_name

        return sdtgen.scan.ScanResult(str(path), by_name("x86_64"), [], {})

    monkeypatch.setattr(sdtgen.scan, "scan", scan)
    assert gc.isenabled()
    assert main(["scan", str(tmp_path / "k.o")]) == (2 if fails else 0)
    assert seen == [False] and gc.isenabled()
    assert main(["include-dir"]) == 0 and gc.isenabled()
