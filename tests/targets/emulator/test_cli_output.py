"""sdtgen boot on the tricks kernel: return values, fault addresses and names as a user sees them."""

from __future__ import annotations

import json

import pytest
from helpers import sdtgen


def test_a_str_return_that_is_no_readable_pointer_shows_unreadable(tricks):
    proc = sdtgen("boot", tricks, "--run", "probed:str", "--arg", "1", "--run", "halt:void")
    assert proc.stdout.splitlines()[1:] == ["probed(1) = <unreadable>"]  # 42 is no address; void stays void
    proc = sdtgen("boot", tricks, "--json", "--run", "probed:str", "--arg", "1")
    assert {"event": "return", "symbol": "probed", "value": None} in [json.loads(x) for x in proc.stdout.splitlines()]


def test_fault_addresses_are_exact(tricks):
    proc = sdtgen("boot", tricks, "--run", "read_at", "--arg", "0x1234", "--run", "poke", "--arg", "0x5678",
                  "--arg", "1")
    faults = proc.stderr.splitlines()
    assert "page fault: read from unmapped address 0x1234 " in faults[0]
    assert "page fault: write to unmapped address 0x5678 " in faults[1]


def test_control_characters_in_names_are_escaped(tricks, tmp_path):
    from sdtgen.elf.reader import ElfFile

    bad = tmp_path / "escape.elf"
    data = bytearray(tricks.read_bytes())
    with ElfFile(tricks) as elf:
        rodata = elf.section(".rodata")
        at = rodata.offset + bytes(elf.contents(rodata)).index(b"entry\0")
    data[at:at + 5] = b"\x1b[2J\n"  # the probe's name: clear the screen, then a new line
    bad.write_bytes(data)
    proc = sdtgen("boot", bad, "--enable", "tk:::", "--run", "probed:int", "--arg", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1:] == ["tk:code:probed:\\x1b[2J\\n  arg0=1", "probed(1) = 42"]
    proc = sdtgen("boot", bad, "--json", "--enable", "tk:::", "--run", "probed:int", "--arg", "1")
    fire = json.loads(proc.stdout.splitlines()[1])
    assert fire["probe"] == "tk:code:probed:\x1b[2J\n"  # JSON keeps the name, escaped by JSON itself


@pytest.mark.parametrize("arch", ["x86_64", "i386", "aarch64", "riscv64"])
def test_fault_addresses_are_exact_on_every_architecture(arch_kernel, arch):
    image = arch_kernel(arch).image
    proc = sdtgen("boot", image, "--run", "vfs_lookup", "--arg", "0x1234")  # reads the path's first byte
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"{image}: error: .text:vfs_lookup+0x")
    assert line.endswith(": fault in vfs_lookup: page fault: read from unmapped address 0x1234 "
                         "(last probe fired: none)")
