"""USDT probes (.note.stapsdt) list exactly as readelf -n shows them: in the system's own binaries,
and in programs, shared objects and objects gcc builds with <sys/sdt.h> on four architectures."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import readelf
from builders import ARCHES
from helpers import IN_CI, run, sdtgen

# Installed ELF files known to carry USDT notes on Debian 12: python3.11 (python3.11-minimal) and
# libstdc++.so.6 (libstdc++6), which .ci/run installs and CI insists on; libpython3.11 when present.
CORPUS = ("/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6")
OPTIONAL = ("/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",)

PROBES = r"""
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
unsigned short demo_hot_semaphore __attribute__((section(".probes"))) = 0;
unsigned short demo_cold__path_semaphore __attribute__((section(".probes"))) = 0;
long sink[4];
int work(int a, long b, unsigned char c)
{
	DTRACE_PROBE3(demo, hot, a, b, c);
	if (demo_cold__path_semaphore)
		STAP_PROBE2(demo, cold__path, b, sink[a & 3]);
	return a + (int)b + c;
}
"""
PLAIN = r"""
#include <sys/sdt.h>
int work(int a, long b, unsigned char c);
static int twice(int x) { STAP_PROBE1(demo, twice, x); return 2 * x; }
int main(int argc, char **argv)
{
	STAP_PROBE2(demo, start, argc, (unsigned short)argc);
	STAP_PROBE2(demo, start, argv, (signed char)argc);
	return work(argc, 7, 1) + twice(argc);
}
"""


def listed(path, *kinds: str) -> list[dict]:
    argv = ["probes", path, "--json"]
    for k in kinds:
        argv += ["--kind", k]
    return json.loads(sdtgen(*argv, check=True).stdout)["probes"]


def sites(probes: list[dict]) -> list[tuple]:
    """One row per site: (provider, note name, address, semaphore, argument specs)."""
    return sorted((p["provider"], p["raw_name"], a, p["semaphore"], " ".join(args))
                  for p in probes for a, args in zip(p["addresses"], p["site_args"], strict=True))


def expected_linked(path: Path) -> list[tuple]:
    """readelf -n's notes, each moved by .stapsdt.base's address minus the note's base."""
    base = next((s.addr for s in readelf.sections(path) if s.name == ".stapsdt.base"), None)
    mask = (1 << (64 if "ELF64" in run(["readelf", "-h", str(path)]).stdout else 32)) - 1  # addresses wrap
    out = []
    for n in readelf.notes(path):
        delta = 0 if base is None else base - n.base
        out.append((n.provider, n.name, (n.location + delta) & mask,
                    (n.semaphore + delta) & mask if n.semaphore else None, n.args))
    return sorted(out)


def expected_object(path: Path) -> list[tuple]:
    """readelf -n (which applies the relocations) for the values, readelf -r -s -S for their sections.

    Each note's fields are relocated in order: site, base (against _.stapsdt.base), then the
    semaphore when it has one."""
    syms, secs = readelf.symbols(path), {str(s.index): s.name for s in readelf.sections(path)}
    rows = next(r for r in readelf.relocations(path) if r.name.endswith(".note.stapsdt")).rows
    bases = [i for i, r in enumerate(rows) if syms[r[1]].name == "_.stapsdt.base"]
    out = []
    for k, (n, b) in enumerate(zip(readelf.notes(path), bases, strict=True)):
        pc = syms[rows[b - 1][1]]
        has_sem = b + 1 < len(rows) and (k + 1 == len(bases) or bases[k + 1] - 1 != b + 1)
        sem = None
        if has_sem:
            s = syms[rows[b + 1][1]]
            sem = f"{s.name if s.ndx == 'UND' else secs[s.ndx]}+{n.semaphore:#x}"
        out.append((n.provider, n.name, f"{secs[pc.ndx]}+{n.location:#x}", sem, n.args))
    return sorted(out)


def test_installed_binaries_list_exactly_what_readelf_shows():
    present = [Path(p) for p in CORPUS + OPTIONAL if Path(p).exists()]
    if IN_CI:
        missing = set(CORPUS) - set(map(str, present))
        assert not missing, f"missing from the corpus: {missing} (.ci/run installs python3.11-minimal libstdc++6)"
    if not present:
        pytest.skip("no installed ELF file with USDT notes: apt-get install python3.11-minimal libstdc++6")
    for path in present:
        got = listed(path, "stapsdt")
        assert got and sites(got) == expected_linked(path), path
        assert all(p["module"] == path.name and p["kind"] == "stapsdt" for p in got)


@pytest.fixture(scope="session", params=ARCHES)
def usdt(request, builder, sdt_include):
    """(builder, object with semaphores, shared object, executable) for one architecture."""
    b = builder(request.param)
    inc = f"-I{sdt_include}"
    obj = b.obj("usdt", PROBES, inc)
    pic = b.obj("usdt-pic", PROBES, inc, "-fPIC")
    main = b.obj("usdt-main", PLAIN, inc)
    so = b.link("libusdt.so", [pic], "-shared")
    exe = b.link("usdt", [main, obj], "-Wl,-e,main")
    return b, obj, so, exe


def test_objects_list_their_notes_through_relocations(usdt):
    _, obj, _, _ = usdt
    got = listed(obj)
    assert sites(got) == expected_object(obj)
    assert {p["function"] for p in got} == {"work"}  # where the C source put them


def test_shared_objects_and_executables_match_readelf(usdt):
    _, _, so, exe = usdt
    for path in (so, exe):
        assert sites(listed(path)) == expected_linked(path), path


def test_semaphores_are_the_addresses_of_the_semaphore_variables(usdt):
    _, _, so, _ = usdt
    syms = {s.name: s.value for s in readelf.symbols(so).values()}
    by_name = {p["raw_name"]: p["semaphore"] for p in listed(so)}
    assert by_name == {"hot": syms["demo_hot_semaphore"], "cold__path": syms["demo_cold__path_semaphore"]}


def test_rows_group_sites_by_function_and_name_as_dtrace_does(usdt):
    _, _, _, exe = usdt
    rows = {(p["provider"], p["function"], p["name"]): p for p in listed(exe)}
    assert rows[("demo", "main", "start")]["sites"] == 2  # two notes, one probe
    assert rows[("demo", "work", "cold-path")]["raw_name"] == "cold__path"  # __ lists as -
    assert ("demo", "twice", "twice") in rows or ("demo", "main", "twice") in rows  # inlined or not


def test_argument_specs_give_the_c_types_size_and_signedness(usdt):
    _, _, _, exe = usdt
    specs = {p["name"]: p["arg_specs"] for p in listed(exe)}
    assert [(a["size"], a["signed"]) for a in specs["hot"]] == [(4, True), (8 if "64" in usdt[0].arch else 4, True),
                                                                 (1, False)]
    assert [(a["size"], a["signed"]) for a in specs["twice"]] == [(4, True)]
    for a in specs["hot"]:
        assert a["spec"] == f"{'-' if a['signed'] else ''}{a['size']}@{a['location']}"


def move_stapsdt_base(path: Path, out: Path, delta: int) -> Path:
    """A copy whose .stapsdt.base section header says it was moved by ``delta`` (as prelink does)."""
    data = bytearray(path.read_bytes())
    is64 = data[4] == 2
    shoff = struct.unpack_from("<Q" if is64 else "<I", data, 0x28 if is64 else 0x20)[0]
    entsize = 64 if is64 else 40
    index = readelf.section(path, ".stapsdt.base").index
    at = shoff + index * entsize + (16 if is64 else 12)
    fmt = "<Q" if is64 else "<I"
    struct.pack_into(fmt, data, at, struct.unpack_from(fmt, data, at)[0] + delta)
    out.write_bytes(data)
    return out


def test_a_moved_stapsdt_base_moves_every_site_and_semaphore(usdt, tmp_path):
    _, _, so, _ = usdt
    moved = move_stapsdt_base(so, tmp_path / "moved.so", 0x1000)
    before, after = sites(listed(so)), sites(listed(moved))
    assert after == expected_linked(moved) != before
    assert [s[2] + 0x1000 for s in before] == [s[2] for s in after]


def test_a_stapsdt_base_moved_below_the_sites_wraps_to_the_address_width(usdt, tmp_path):
    """.stapsdt.base moved to address 0 puts the sites before it below zero: they wrap, as the CPU's
    address arithmetic does, to the top of the 64- or 32-bit address space."""
    _, _, so, _ = usdt
    top = 1 << (64 if "64" in usdt[0].arch else 32)
    moved = move_stapsdt_base(so, tmp_path / "wrapped.so", -readelf.section(so, ".stapsdt.base").addr)
    got = sites(listed(moved))
    assert got == expected_linked(moved)
    assert all(0 <= s[2] < top for s in got) and any(s[2] > top // 2 for s in got)


def test_aarch64_memory_operands_keep_their_space(tmp_path):
    from sdtgen.tables.stapsdt import parse_args

    got = parse_args("-4@[sp, 16] 8@x0 4@$5")
    assert [(a.size, a.signed, a.location) for a in got] == [(4, True, "[sp, 16]"), (8, False, "x0"), (4, False, "$5")]


def with_note_header(path: Path, out: Path, edit) -> Path:
    """A copy of ``path`` whose first note's (namesz, descsz) become ``edit(namesz, descsz)``."""
    data = bytearray(path.read_bytes())
    offset = readelf.section(path, ".note.stapsdt").offset
    struct.pack_into("<II", data, offset, *edit(*struct.unpack_from("<II", data, offset)))
    out.write_bytes(data)
    return out


@pytest.mark.parametrize(("edit", "what"), [
    (lambda n, d: (n, d + 0x10000), "past the section's end"),
    (lambda n, d: (n, 8), "shorter than its 3 addresses"),
    (lambda n, d: (n, d - 1), "each ending in a NUL"),
])
def test_damaged_notes_are_one_line_and_exit_2(builder, sdt_include, tmp_path, edit, what):
    b = builder("x86_64")
    so = b.link("libdamage.so", [b.obj("damage", PROBES, f"-I{sdt_include}", "-fPIC")], "-shared")
    bad = with_note_header(so, tmp_path / "bad.so", edit)
    proc = sdtgen("probes", bad)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and what in proc.stderr and str(bad) in proc.stderr


def test_a_spec_lists_the_notes_readelf_shows_for_it(usdt):
    """`sdtgen probes FILE SPEC` as `dtrace -l -n` / `bpftrace -l`: a glob on the name, against readelf -n."""
    _, _, _, exe = usdt
    want = sorted((n.provider, n.name) for n in readelf.notes(exe) if n.provider == "demo" and n.name.endswith("t"))
    got = json.loads(sdtgen("probes", exe, "demo:::*t", "--json", check=True).stdout)["probes"]
    assert want and sorted((p["provider"], p["raw_name"]) for p in got for _ in p["addresses"]) == want
