"""Names from hostile files: refused when they could become code, bounded, never printed raw."""

from __future__ import annotations

import resource
import subprocess

import pytest
from crafted import (
    PREFIX,
    calls_object,
    descriptor_object,
    rename_in_place,
    rename_in_section,
    share_one_long_name,
)
from helpers import SDTGEN, run, sdtgen

from sdtgen.elf.reader import MAX_NAME
from sdtgen.errors import MAX_SHOWN

CONTROL = ("\x1b", "\r", "\x07")


def one_error_line(proc, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr[:2000]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0] and "Traceback" not in proc.stderr, proc.stderr[:2000]
    for n in needles:
        assert n in lines[0], lines[0][:2000]
    return lines[0]


@pytest.mark.parametrize(("symbol", "why"), [
    ("memcpy", "does not start with the probe prefix"),  # an empty memcpy would replace the real one
    ("int", "is not a valid C identifier"),  # stubs that do not compile
    (PREFIX, "does not start with the probe prefix"),  # the prefix alone names no probe
])
def test_a_descriptor_must_name_a_prefixed_c_identifier(tmp_path, symbol, why):
    obj = descriptor_object(tmp_path, "desc", f'.asciz \\"{symbol}\\"')
    assert symbol in run(["readelf", "-p", ".sdt_desc", str(obj)]).stdout
    gen = ["gen", obj, "--stubs", tmp_path / "s.c", "--table", tmp_path / "t.S"]
    for argv in (["scan", obj], ["probes", obj], gen):
        one_error_line(sdtgen(*argv), "bad probe descriptors", why)
    assert not (tmp_path / "s.c").exists() and not (tmp_path / "t.S").exists()


def test_a_ten_megabyte_refused_name_is_printed_cut_short(tmp_path):
    obj = descriptor_object(tmp_path, "huge", f'.ascii \\"{PREFIX}\\"\\n.fill 10000000, 1, 0x61\\n.byte 0')
    assert obj.stat().st_size > 10_000_000
    line = one_error_line(sdtgen("scan", obj), "bad probe descriptors", "more characters")
    assert len(line) < 2 * MAX_SHOWN + len(str(obj)) + 300


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # a copy per symbol would need far more


def test_many_symbols_sharing_one_long_name_are_refused_without_a_copy_each(tmp_path):
    bad = tmp_path / "shared.o"
    count = share_one_long_name(calls_object(tmp_path, "calls", 400), bad, 4 << 20)
    assert count == 400  # (test_a_name_at_the_limit_is_read checks the crafting against readelf)
    for cmd in ("scan", "probes"):
        proc = subprocess.run([SDTGEN, cmd, str(bad)], capture_output=True, text=True, timeout=120,
                              preexec_fn=_limit_memory)
        line = one_error_line(proc, f"longer than {MAX_NAME} bytes")
        assert len(line) < 1000


def test_a_name_at_the_limit_is_read(tmp_path):
    bad = tmp_path / "long.o"
    assert share_one_long_name(calls_object(tmp_path, "calls", 2), bad, MAX_NAME) == 2
    names = run(["readelf", "-sW", str(bad)]).stdout.split()
    assert names.count(PREFIX + "x" * (MAX_NAME - len(PREFIX))) == 2  # two symbols, one string
    proc = sdtgen("scan", "--json", bad)
    assert proc.returncode == 0, proc.stderr
    assert f'"symbol": "{PREFIX}{"x" * (MAX_NAME - len(PREFIX))}"' in proc.stdout


def test_control_characters_in_symbol_names_are_escaped_in_scan_and_probes(tmp_path):
    obj = calls_object(tmp_path, "calls", 1, stem="zz_m_f_abcdefghijklmnopqrstu")
    bad = tmp_path / "ctl.o"
    hostile = b"zz_m_f_\r\x1b[2Ksdtgen: ok\x07\nxx"
    rename_in_place(obj, bad, b"zz_m_f_abcdefghijklmnopqrstu", hostile.ljust(28, b"y"))
    assert b"\x1b[2K" in bad.read_bytes()
    for cmd in ("scan", "probes"):
        out = sdtgen(cmd, bad, check=True).stdout
        assert not any(c in out for c in CONTROL), repr(out)
        assert "\\r\\x1b[2Ksdtgen: ok\\x07\\nxx" in out
        assert len(out.splitlines()) == (3 if cmd == "scan" else 2)  # header lines and one row: no fake line


def test_control_characters_in_an_image_table_string_are_escaped(kernel, tmp_path):
    bad = tmp_path / "ctl.elf"
    rename_in_section(kernel.image, bad, ".rodata", b"lookup", b"\x1b[2J\r\n")
    out = sdtgen("probes", bad, check=True).stdout
    assert not any(c in out for c in CONTROL) and "\\x1b[2J\\r\\n" in out
    assert len(out.splitlines()) == len(sdtgen("probes", kernel.image, check=True).stdout.splitlines())
