"""Jump labels: a __jump_table of Linux's relative struct jump_entry (code, target, key; the key's low
bits are flags), made the way Linux's asm/jump_label.h makes it, lists at the sites and keys readelf -r
(objects) and objdump -s (linked files) show, on four architectures."""

from __future__ import annotations

import json
import struct

import pytest
import readelf
from builders import ARCHES
from helpers import run, sdtgen

# Our own static branch: a NOP the kernel would patch into a jump, and a table entry naming it.
# (instruction, pointer directive, operand for the key) per architecture.
NOPS = {
    "x86_64": (".byte 0x0f,0x1f,0x44,0x00,0x00", ".quad", "%c0"),
    "i386": (".byte 0x0f,0x1f,0x44,0x00,0x00", ".long", "%c0"),
    "aarch64": ("nop", ".quad", "%c0"),
    "riscv64": (".option push\n.option norelax\n.option norvc\n1: nop\n.option pop", ".dword", "%0"),
}
SOURCE = r"""
struct key { int enabled; long entries; };
struct key key_a;
static struct key key_b;
extern struct key key_ext;

static inline __attribute__((always_inline)) int branch(struct key *k, int likely)
{
    asm goto(SITE "\n"
         ".pushsection __jump_table, \"aw\"\n"
         ".balign WORD\n"
         ".long 1b - ., %l[yes] - .\n"
         PTR " " KEY " - .\n"
         ".popsection"
         : : "i"((char *)k + likely) : : yes);
    return 0;
yes:
    return 1;
}

int on_a(void) { return branch(&key_a, 0) ? 5 : 6; }
int on_b(int x) { if (branch(&key_b, 1)) x++; if (branch(&key_a, 0)) x--; return x + (int)key_b.entries; }
int on_ext(void) { return branch(&key_ext, 0); }
"""
KEYS = {"on_a": ["key_a"], "on_b": ["key_a", "key_b"], "on_ext": ["key_ext"]}


def listed(path) -> list[dict]:
    return json.loads(sdtgen("probes", path, "--json", "--kind", "jump", check=True).stdout)["probes"]


def sites(probes: list[dict]) -> list[tuple]:
    return sorted(((p["function"], p["name"], a) for p in probes for a in p["addresses"]), key=str)


def build(builder, arch: str):
    site, ptr, key = NOPS[arch]
    first = site if "1:" in site else f"1: {site}"
    word = "4" if arch == "i386" else "8"
    source = SOURCE.replace("SITE", json.dumps(first)).replace("PTR", json.dumps(ptr)) \
        .replace("KEY", json.dumps(key)).replace(".balign WORD", f".balign {word}")
    b = builder(arch)
    obj = b.obj("labelled", source, "-fno-pic")
    ext = b.obj("key-ext", "struct key { int enabled; long entries; } key_ext;", "-fno-pic")
    exe = b.link("labelled", [obj, ext], "-no-pie", "-Wl,-e,on_a")
    return arch, obj, exe


@pytest.fixture(scope="module", params=ARCHES)
def labelled(request, builder):
    return build(builder, request.param)


def test_objects_list_each_entry_through_its_relocations(labelled):
    arch, obj, _ = labelled
    got = listed(obj)
    fields = readelf.relocated_fields(obj, "__jump_table")
    size = 12 if arch == "i386" else 16
    expected = []
    for (_, off), rels in sorted(fields.items()):
        if off % size == 0:  # the code field; RISC-V writes it as an ADD/SUB pair: the ADD is the site
            code = next(w for t, w in rels if "SUB" not in t)
            (key,) = [w for t, w in fields[(_, off + 8)] if "SUB" not in t]
            sec, flagged = key.rsplit("+", 1)
            key = readelf.symbol_at(obj, f"{sec}+{int(flagged, 16) & ~3:#x}")
            expected.append((_function(obj, code), key, code))
    assert sites(got) == sorted(expected, key=str)
    assert {(p["function"], p["name"]) for p in got} == {(f, k) for f, ks in KEYS.items() for k in ks}


def _function(path, where: str) -> str:
    sec, off = where.rsplit("+", 1)
    ndx = str(readelf.section(path, sec).index)
    return readelf.function_at(path, int(off, 16), ndx)


def test_linked_files_list_the_sites_and_keys_objdump_shows(labelled):
    arch, _, exe = labelled
    word = 4 if arch == "i386" else 8
    (start, data), = readelf.contents(exe, "__jump_table")
    expected = []
    for off in range(0, len(data), 8 + word):
        code = start + off + int.from_bytes(data[off:off + 4], "little", signed=True)
        key = (start + off + 8 + int.from_bytes(data[off + 8:off + 8 + word], "little", signed=True)) & ~3
        mask = (1 << (8 * word)) - 1
        expected.append((readelf.function_at(exe, code & mask), readelf.symbol_at(exe, key & mask), code & mask))
    got = listed(exe)
    assert sites(got) == sorted(expected, key=str)
    assert {(p["function"], p["name"]) for p in got} == {(f, k) for f, ks in KEYS.items() for k in ks}
    assert sum(p["sites"] for p in got) == 4


def test_a_jump_table_cut_mid_entry_is_one_line_and_exit_2(builder, tmp_path):
    _, _, exe = build(builder, "x86_64")
    sec = readelf.section(exe, "__jump_table")
    data = bytearray(exe.read_bytes())
    # Shrink the section header's size by 4: the last entry is cut.
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    at = shoff + sec.index * 64 + 32
    struct.pack_into("<Q", data, at, sec.size - 4)
    bad = tmp_path / "bad"
    bad.write_bytes(data)
    proc = sdtgen("probes", bad)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "whole number of 16-byte entries" in proc.stderr


def test_an_entry_outside_every_section_is_named_by_no_function(builder):
    """The code field of an entry past the last function (a label without .size) is in no function."""
    b = builder("x86_64")
    src = b.dir / "label.s"
    src.write_text(".text\n.globl start\n.type start, @function\nstart: ret\n"
                   ".data\n.globl key\n.type key, @object\n.size key, 8\nkey: .quad 0\n"
                   ".section __jump_table, \"aw\"\n.balign 8\n"
                   ".long start - .\n.long start - .\n.quad key - .\n"
                   ".long start + 0x100000 - .\n.long start - .\n.quad key - .\n")
    obj = b.dir / "label.o"
    run(["as", "-o", str(obj), str(src)])
    exe = b.link("label", [obj], "-no-pie", "-Wl,-e,start")
    start = next(s for s in readelf.symbols(exe).values() if s.name == "start")
    outside = start.value + 0x100000
    assert start.size == 0 and not any(s.addr <= outside < s.addr + s.size for s in readelf.sections(exe))
    got = sorted((p["addresses"][0], p["function"], p["name"]) for p in listed(exe))
    assert got == [(start.value, "start", "key"), (outside, "", "key")]
