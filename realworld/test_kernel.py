"""A real Linux kernel (Debian's linux-source-6.1, tinyconfig + ftrace + jump labels, built by
build-kernel.sh): sdtgen's listings of vmlinux and vmlinux.o agree exactly with readelf and objdump.

Run by `make realworld`, never by `make test`: the kernel takes minutes to build.
"""

from __future__ import annotations

import bisect
import json
import re
from pathlib import Path

import pytest
import readelf
from helpers import run, sdtgen

SRC = Path(__file__).resolve().parent.parent / "build" / "realworld" / "linux-source-6.1"
VMLINUX, VMLINUX_O = SRC / "vmlinux", SRC / "vmlinux.o"


@pytest.fixture(scope="module", autouse=True)
def kernel():
    if not VMLINUX.exists() or not VMLINUX_O.exists():
        pytest.fail("no kernel in build/realworld: run `make realworld` (realworld/build-kernel.sh)")


def listed(path: Path, kind: str) -> list[dict]:
    return json.loads(sdtgen("probes", path, "--json", "--kind", kind, check=True).stdout)["probes"]


def flat(probes: list[dict]) -> list[tuple]:
    return sorted(((p["function"], p["name"], a) for p in probes for a in p["addresses"]), key=str)


class Functions:
    """readelf -s's FUNC symbols of a linked file, for naming many addresses quickly."""

    def __init__(self, path: Path, types=("FUNC",)) -> None:
        syms = sorted((s.value, s.size, s.name) for s in readelf.symbols(path).values()
                      if s.type in types and s.ndx != "UND")
        self.starts, self.syms = [s[0] for s in syms], syms

    def at(self, addr: int) -> str:
        i = bisect.bisect_right(self.starts, addr) - 1
        while i >= 0 and self.starts[i] == self.syms[i][0]:
            value, size, name = self.syms[i]
            if value <= addr < value + max(size, 1):
                return name
            if i and self.starts[i - 1] == value:
                i -= 1
                continue
            break
        return ""


def span(path: Path, start: str, stop: str) -> tuple[int, bytes]:
    """(address, bytes) between two symbols, from objdump -s of the section holding them."""
    syms = {s.name: s.value for s in readelf.symbols(path).values()}
    lo, hi = syms[start], syms[stop]
    sec = next(s for s in readelf.sections(path) if s.addr <= lo and hi <= s.addr + s.size and s.size)
    (addr, data), = readelf.contents(path, sec.name)
    return lo, data[lo - addr:hi - addr]


def test_vmlinux_mcount_is_every_address_between_start_and_stop_mcount_loc():
    _, data = span(VMLINUX, "__start_mcount_loc", "__stop_mcount_loc")
    addrs = [a for a in readelf.words(data, 8) if a]
    funcs = Functions(VMLINUX)
    got = listed(VMLINUX, "mcount")
    # A __weak function another object overrides keeps its code and its call but loses its symbol:
    # nothing holds the site, and it is named by its address.
    assert flat(got) == sorted(((funcs.at(a), funcs.at(a) or f"{a:#x}", a) for a in addrs), key=str)
    assert len(addrs) > 5000 and sum(not p["function"] for p in got) < 100


def test_vmlinux_o_mcount_is_every_relocation_of_mcount_loc():
    fields = readelf.relocated_fields(VMLINUX_O, "__mcount_loc")
    got = listed(VMLINUX_O, "mcount")
    assert sorted(a for p in got for a in p["addresses"]) == sorted(w for [(_, w)] in fields.values())
    assert all(p["name"] == (p["function"] or p["addresses"][0]) for p in got)
    assert len(got) == len(listed(VMLINUX, "mcount"))  # one probe per traced function, before and after the link


def test_vmlinux_jump_labels_are_the_entries_objdump_shows():
    lo, data = span(VMLINUX, "__start___jump_table", "__stop___jump_table")
    funcs, objs = Functions(VMLINUX), Functions(VMLINUX, ("OBJECT",))
    expected = []
    mask = (1 << 64) - 1
    for off in range(0, len(data), 16):
        code = (lo + off + int.from_bytes(data[off:off + 4], "little", signed=True)) & mask
        key = (lo + off + 8 + int.from_bytes(data[off + 8:off + 16], "little", signed=True)) & mask & ~3
        name = objs.at(key)
        value = next(v for v, _, n in objs.syms if n == name)
        expected.append((funcs.at(code), name if key == value else f"{name}+{key - value:#x}", code))
    got = listed(VMLINUX, "jump")
    assert flat(got) == sorted(expected, key=str)
    assert len(expected) > 100


def test_vmlinux_o_jump_labels_are_the_relocations_readelf_shows():
    fields = readelf.relocated_fields(VMLINUX_O, "__jump_table")
    codes = sorted(w for (_, off), [(_, w)] in fields.items() if off % 16 == 0)
    got = listed(VMLINUX_O, "jump")
    assert sorted((a for p in got for a in p["addresses"]), key=str) == sorted(codes, key=str)
    keys = sorted(w for (_, off), [(_, w)] in fields.items() if off % 16 == 8)
    assert len(keys) == len(codes)


def test_patchable_entries_are_absent_as_readelf_says():
    for path in (VMLINUX, VMLINUX_O):
        has = any(s.name == "__patchable_function_entries" for s in readelf.sections(path))
        assert bool(listed(path, "patchable")) == has


def test_scan_finds_every_fentry_call_readelf_r_shows():
    expected, section = set(), None
    for line in run(["readelf", "-rW", str(VMLINUX_O)]).stdout.splitlines():
        m = re.match(r"Relocation section '\.rela(\S+)'", line)
        if m:
            section = m[1]
        elif "__fentry__" in line:
            expected.add((section, int(line.split()[0], 16)))
    sites = json.loads(sdtgen("scan", "--prefix", "__fentry__", "--json", VMLINUX_O, check=True).stdout)["sites"]
    # A call's rel32 follows its e8; a reference (ftrace's own `mov $__fentry__`) is the field itself.
    assert {(s["section"], s["offset"] + (s["form"] == "call")) for s in sites} == expected
    assert all(s["length"] == 5 for s in sites if s["form"] == "call")
    assert sum(s["form"] == "call" for s in sites) > len(sites) - 5
    assert len(sites) == len(expected) > 5000
