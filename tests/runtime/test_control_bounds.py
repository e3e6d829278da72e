"""The control line's bounds, each exactly at the limit and one past it, with the control core built for this
machine under AddressSanitizer: a byte read or written past any of its buffers ends the program with ASan's
report. The limits are the one description's (sdtgen/layout.py): SDT_MAX_STRING, SDT_CONTROL_LINE, the 0x80 bytes
one `read` answers, the kernel's program memory (the harness gives 512 bytes), a word of 16 hexadecimal digits."""

from __future__ import annotations

import subprocess

import pytest
from helpers import need_tool, run
from runtime_support import HERE, include_dir, runtime_dir

from sdtgen.layout import VALUES

MAX_READ = 0x80
PROGRAM_MEMORY = 512  # control_harness.c's programs[64]


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    out = tmp_path_factory.mktemp("asan") / "control"
    rt = runtime_dir()
    run([need_tool("gcc", "gcc"), "-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer", "-Wall", "-Wextra",
         "-Werror", "-DHARNESS_GUARDED", f"-DMAX_READ_BYTES={MAX_READ}", f"-I{include_dir()}", f"-I{rt}", "-o",
         str(out), str(HERE / "control_asan_main.c"), str(HERE / "control_harness.c"), str(rt / "sdt_control.c"),
         str(rt / "arch" / "sdt_x86_64.c")])
    return out


def session(core, build) -> tuple[list[str], str]:
    """The harness started, ``build(sum, buffer, programs)``'s lines fed to it: its reply lines (ASan's silence
    asserted)."""
    proc = subprocess.Popen([str(core)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0"})
    first = proc.stdout.readline().decode().split()
    data = "".join(line + "\n" for line in build(int(first[1], 16), int(first[3], 16), int(first[5], 16)))
    out, err = proc.communicate(data.encode(), timeout=60)
    assert proc.returncode == 0 and "AddressSanitizer" not in err.decode(), err.decode()
    return out.decode().splitlines(), data


def refused(line: str, code: str) -> bool:
    return line.startswith(f"error {VALUES[code]} ")


def test_a_string_argument_of_127_bytes_is_taken_and_one_of_128_refused(core):
    longest = "41" * VALUES["SDT_MAX_STRING"]
    lines, _ = session(core, lambda s, b, p: [f"run 0 {s:x} 1 s:{longest}", f"run 0 {s:x} 1 s:{longest}41"])
    assert lines[0].startswith("return 0 ") and lines[1] == "ok run 1"
    assert refused(lines[2], "SDT_ERR_USAGE"), lines


def test_read_answers_its_0x80_bytes_and_refuses_0x81(core):
    lines, _ = session(core, lambda s, b, p: [f"read {b:x} {MAX_READ:x}", f"read {b:x} {MAX_READ + 1:x}"])
    assert lines[0] == "bytes " + bytes((k * 7 + 1) & 0xFF for k in range(MAX_READ)).hex()
    assert lines[1] == f"ok read {MAX_READ:x}"
    assert refused(lines[2], "SDT_ERR_USAGE"), lines


def test_a_line_of_1024_bytes_is_heard_and_one_of_1025_refused_as_long(core):
    n = VALUES["SDT_CONTROL_LINE"]
    at_limit = "list" + " " * (n - 7) + ":::"
    assert len(at_limit) == n
    lines, _ = session(core, lambda s, b, p: [at_limit, at_limit + ":", "hello"])
    assert lines[:2] == ["probe 0 0 0 :::", "ok list 1"]  # the harness's one probe, of empty names
    assert refused(lines[2], "SDT_ERR_LONG") and lines[2].startswith("error -9 list: "), lines
    assert lines[-1] == "ok hello 0"


def test_program_memory_is_reserved_to_its_last_byte_and_not_one_past(core):
    lines, _ = session(core, lambda s, b, p: [f"program {PROGRAM_MEMORY:x}", "program 1"])
    assert lines[0] == f"ok program {int(lines[0].split()[-1], 16):x}"
    assert refused(lines[1], "SDT_ERR_ARG"), lines
    lines, _ = session(core, lambda s, b, p: [f"program {PROGRAM_MEMORY + 1:x}"])
    assert refused(lines[0], "SDT_ERR_ARG"), lines
    lines, _ = session(core, lambda s, b, p: [f"program {PROGRAM_MEMORY:x}", f"pbytes {p + PROGRAM_MEMORY - 8:x} "
                                              f"{'ab' * 8}", f"pbytes {p + PROGRAM_MEMORY - 7:x} {'ab' * 8}"])
    assert lines[:2] == [f"ok program {lines[0].split()[-1]}", "ok pbytes 8"]
    assert refused(lines[2], "SDT_ERR_ARG"), lines


def test_a_number_of_16_hexadecimal_digits_is_taken_and_one_of_17_refused(core):
    lines, _ = session(core, lambda s, b, p: [f"run 0 {s:x} 1 ffffffffffffffff", f"run 0 {s:x} 1 10000000000000000",
                                           f"run 0 {s:x} 1 0ffffffffffffffff"])
    assert lines[:2] == ["return 0 ffffffffffffffff", "ok run 1"]
    assert refused(lines[2], "SDT_ERR_USAGE") and refused(lines[3], "SDT_ERR_USAGE"), lines
