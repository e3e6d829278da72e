"""A damaged module table, made from fixtures/module's hkm.ko by rewriting one relocation of its table (the
place readelf gives): `sdtgen check OBJ MOD.ko` refuses it in one line with exit 1 exactly when the runtime's
own loader, sdt_module_load in the emulated boot, refuses the same file, and a refused load writes nothing; the
undamaged module passes both. A table whose entries are the kernel's or a loaded module's is refused
(SDT_ERR_MODULE_LOADED) and leaves them as they were: the loaded module still fires as its C runs natively."""

from __future__ import annotations

import io
import struct
import subprocess
from pathlib import Path

import pytest
from helpers import SDTGEN, run
from module_native import MODULE, session_firings
from tables import readelf

from sdtgen.layout import VALUES
from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session

RELA = 24  # bytes of an Elf64_Rela: r_offset, r_info, r_addend


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("module")
    run(["make", "-C", str(MODULE), "ARCH=x86_64", f"O={out}", f"SDTGEN={SDTGEN}"])
    return out


def rela_row(ko: Path, section: str, offset: int) -> tuple[int, tuple]:
    """The file offset of the relocation readelf lists at ``offset`` of ``section``, and readelf's row."""
    (rows,) = [r.rows for r in readelf.relocations(ko) if r.name in (f".rela{section}", f".rela.{section}")]
    i = next(i for i, r in enumerate(rows) if r[0] == offset)
    rela = next(s for s in readelf.sections(ko) if s.name in (f".rela{section}", f".rela.{section}"))
    return rela.offset + RELA * i, rows[i]


def damaged(built: Path, out: Path, edit) -> Path:
    ko = built / "hkm.ko"
    data = bytearray(ko.read_bytes())
    edit(ko, data)
    out.write_bytes(data)
    return out


def move_field(field: int, by: int):
    """The table's field at ``field`` (4 sites, 8 sites_end, 12 probes, 16 probes_end) resolved ``by`` bytes on."""
    def edit(ko: Path, data: bytearray) -> None:
        at, row = rela_row(ko, "sdt_module_table", field)
        struct.pack_into("<q", data, at + 16, row[3] + by)
    return edit


def flip_magic(ko: Path, data: bytearray) -> None:
    data[readelf.section(ko, "sdt_module_table").offset] ^= 0xFF


def to_field(field: int, other: int):
    """The table's field at ``field`` made to name what the field at ``other`` names (its symbol and addend)."""
    def edit(ko: Path, data: bytearray) -> None:
        at, _ = rela_row(ko, "sdt_module_table", field)
        src, _ = rela_row(ko, "sdt_module_table", other)
        data[at + 8:at + RELA] = data[src + 8:src + RELA]
    return edit


def site_to_site(entry: int, other: int):
    """Site entry ``entry`` made to name the instruction entry ``other`` names (20-byte entries, site first)."""
    def edit(ko: Path, data: bytearray) -> None:
        at, _ = rela_row(ko, "set_sdt_sites_set", 20 * entry)
        src, _ = rela_row(ko, "set_sdt_sites_set", 20 * other)
        data[at + 8:at + RELA] = data[src + 8:src + RELA]
    return edit


def move_site(entry: int, by: int):
    def edit(ko: Path, data: bytearray) -> None:
        at, row = rela_row(ko, "set_sdt_sites_set", 20 * entry)
        struct.pack_into("<q", data, at + 16, row[3] + by)
    return edit


def entry_as_other_form(entry: int, other: int, step: int):
    """Site entry ``entry`` made entry ``other``'s (the same instruction, the same probe) in the form ``step`` from
    other's (SDT_FORM_* values): one instruction cannot be two forms, so no fold makes it one entry."""
    def edit(ko: Path, data: bytearray) -> None:
        for field in (0, 4):  # the site, the probe: relocations against what the other entry names
            at, _ = rela_row(ko, "set_sdt_sites_set", 20 * entry + field)
            src, _ = rela_row(ko, "set_sdt_sites_set", 20 * other + field)
            data[at + 8:at + RELA] = data[src + 8:src + RELA]
        base = readelf.section(ko, "set_sdt_sites_set").offset
        data[base + 20 * entry + 8] = data[base + 20 * other + 8] + step
    return edit


DAMAGE = {
    "magic flipped": (flip_magic, "magic is"),
    "sites_end 64 KiB past the sites": (move_field(8, 0x10000), "sites_end is 0x10000 bytes past"),
    "sites_end one entry past the sites": (move_field(8, 20), "sites_end is 0x14 bytes past"),
    "sites_end before the sites": (move_field(8, -0x40), "sites_end is 0x40 bytes before"),
    "an entry outside the module's text": (move_site(1, 0x10000), "outside the module's code"),
    "two probes' entries at one site": (site_to_site(2, 0), "overlap at"),
    "one probe's entries at one site, call then tail": (entry_as_other_form(1, 0, 1), "overlap at"),
    "one probe's entries at one site, tail then call": (entry_as_other_form(0, 1, 1), "overlap at"),
    "sites with no probes": (to_field(16, 12), "probes_end is 0x108 bytes before"),
    # every site's probe still inside the bounds: only their not being whole probes refuses it
    "probes_end partway into the probe after the last": (move_field(16, 8), "probes_end is 0x8 bytes past"),
}


def loader_says(kernel_image: str, ko: Path) -> int:
    """What sdt_module_load returns for ``ko`` in the emulated boot, placed as the boot's loader places it; a
    load it refuses has written none of the module's code, nor the struct sdt_module given (its table's
    entries may be in address order: the loader sorts them before it reads them)."""
    from sdtgen.modlink import link_module

    s = open_session("emulator", kernel_image, Reporter(as_json=True, out=io.StringIO()), modules=True)
    try:
        t = s.target
        linked = link_module(t.image, str(ko), t.module_base)
        for addr, data, _ in linked.segments:
            t.machine.write(addr, data)
        struct_at = t.module_struct()
        text = linked.text
        before = t.machine.read(*text), t.machine.read(struct_at, 96)
        said = t.runtime.call(t.machine, "sdt_module_load", [struct_at, linked.table, *linked.text])
        if said < 0:
            assert (t.machine.read(*text), t.machine.read(struct_at, 96)) == before
        return said
    finally:
        s.close()


def check(built: Path, ko: Path) -> subprocess.CompletedProcess:
    return run([SDTGEN, "check", str(built / "mod.o"), str(ko)], check=False)


def test_the_undamaged_module_passes_check_and_loads(built, kernel):
    assert check(built, built / "hkm.ko").returncode == 0
    assert loader_says(str(kernel.image), built / "hkm.ko") == 3


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_check_refuses_in_one_line_what_the_loader_refuses(built, kernel, tmp_path, damage):
    edit, said = DAMAGE[damage]
    ko = damaged(built, tmp_path / "bad.ko", edit)
    assert loader_says(str(kernel.image), ko) == VALUES["SDT_ERR_MODULE_TABLE"]  # the truth: the runtime's loader
    proc = check(built, ko)
    assert proc.returncode == 1
    errors = proc.stderr.splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"{ko}: error: its module table's ") and said in errors[0], \
        proc.stderr
    assert proc.stdout == ""


def test_the_loader_refuses_whole_a_table_holding_two_probes_entries_at_one_site(built, kernel, tmp_path):
    """Before, the bad entry was refused alone and the site armed under the good one, while sdt_trap found the
    refused entry first: a breakpoint it called not its own."""
    ko = damaged(built, tmp_path / "bad.ko", site_to_site(1, 0))
    assert loader_says(str(kernel.image), ko) == VALUES["SDT_ERR_MODULE_TABLE"]


CALLS = [3, 0, 5]


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    from module_native import module_firings

    return [{**e, "probe": e["probe"].replace("hkm::", "hkm:hkm:")} if "probe" in e else e
            for e in module_firings(tmp_path_factory.mktemp("native"), CALLS)]


def table_naming(t, at: int, sites: tuple[int, int], probes: tuple[int, int], name: int) -> None:
    """A struct sdt_module_table written at ``at`` naming those ranges (each field relative to itself)."""
    from sdtgen.layout import MODULE_TABLE

    values = {"magic": VALUES["SDT_MODULE_TABLE_MAGIC"], "sites": sites[0], "sites_end": sites[1],
              "probes": probes[0], "probes_end": probes[1], "name": name}
    raw = b"".join(struct.pack("<I" if f == "magic" else "<i", v if f == "magic" else
                               v - (at + MODULE_TABLE.offset(f, 64))) for f, v in values.items())
    t.machine.write(at, raw)


@pytest.mark.parametrize("whose", ["a loaded module's", "the kernel's"])
def test_a_table_whose_entries_are_in_use_is_refused_and_touches_nothing(built, kernel, native, whose):
    """A table made of the loaded module's entries from its second on (or of the kernel's own), given with a
    fresh struct sdt_module and the module's (or the kernel's) text: SDT_ERR_MODULE_LOADED, every entry's state
    as it was, and the armed module fires as its C runs natively (before, the entries were marked refused
    while their code stayed armed: the next firing was a breakpoint the runtime called not its own)."""
    out = io.StringIO()
    s = open_session("emulator", str(kernel.image), Reporter(as_json=True, out=out), modules=True)
    try:
        t = s.target
        s.enable("hkm:::")
        s.load_module(str(built / "hkm.ko"))
        linked = t.module
        if whose == "the kernel's":
            sites, probes = t.image.bounds.sites, t.image.bounds.probes
            code = next(x for x in t.image.elf.sections if x.name == ".text")
            text = [code.addr, code.size]
        else:
            sites, probes, text = linked.bounds.sites, linked.bounds.probes, list(linked.text)
        fresh, table = t.module_struct() - 4096, t.module_struct() - 2048
        table_naming(t, table, (sites[0] + 20, sites[1]), probes, linked.table + 20)
        before = [(x.addr, x.state, x.size) for x in t.runtime.sites]
        said = t.runtime.call(t.machine, "sdt_module_load", [fresh, table, *text])
        t.runtime.refresh()
        assert said == VALUES["SDT_ERR_MODULE_LOADED"]
        assert [(x.addr, x.state, x.size) for x in t.runtime.sites] == before
        for n in CALLS:
            s.run("hkm_work", [n])
    finally:
        s.close()
    assert session_firings(out) == native


def test_an_empty_table_over_a_loaded_modules_text_is_refused_and_loads_nothing(built, kernel):
    """A table of no sites and no probes (nothing its entries could meet), given with a fresh struct and the loaded
    module's text: its text is that module's, so SDT_ERR_MODULE_LOADED, and the runtime's list of tables is as it
    was (before the check of the structs, tables and texts in use returned, a load went on to take it)."""
    s = open_session("emulator", str(kernel.image), Reporter(as_json=True, out=io.StringIO()), modules=True)
    try:
        t = s.target
        s.load_module(str(built / "hkm.ko"))
        linked = t.module
        fresh, table = t.module_struct() - 4096, t.module_struct() - 2048
        empty = (table + 1024, table + 1024)
        table_naming(t, table, empty, empty, linked.table + 20)
        before = [(x.addr, x.state, x.size) for x in t.runtime.sites]
        said = t.runtime.call(t.machine, "sdt_module_load", [fresh, table, *linked.text])
        assert said == VALUES["SDT_ERR_MODULE_LOADED"]
        assert t.machine.read(fresh, 8) == bytes(8), "the refused load wrote its struct"
        t.runtime.refresh()
        assert [(x.addr, x.state, x.size) for x in t.runtime.sites] == before
    finally:
        s.close()


def test_bad_module_files_are_refused_in_one_line_before_anything_of_them_runs(built, kernel, tmp_path):
    """`sdtgen boot IMAGE --module FILE --run hkm_work`: a file that is not there, a linked image, gcc's object
    with no module table, and the damaged tables above (the runtime's loader refuses them): each an error line
    naming what is wrong (the first three before the kernel starts), exit 2, and the module's function never
    runs; the runtime's own report names the entry that made it refuse a table (the kernel's log, a warning)."""
    (tmp_path / "plain.c").write_text("int plain(int x) { return x + 1; }\n")
    run(["gcc", "-c", "-O2", "-o", str(tmp_path / "plain.o"), str(tmp_path / "plain.c")])
    bad = {
        tmp_path / "missing.ko": "no such module file",
        kernel.image: "is not a relocatable object",
        tmp_path / "plain.o": "has no module table (section sdt_module_table)",
        damaged(built, tmp_path / "magic.ko", flip_magic): "the runtime refused to load module hkm: the module's "
                                                           "table is not one gen wrote",
        damaged(built, tmp_path / "dup.ko", site_to_site(1, 0)): "the runtime refused to load module hkm",
    }
    reported = {tmp_path / "dup.ko": "overlaps another entry of the module's table: the module is refused"}
    for path, said in bad.items():
        proc = run([SDTGEN, "boot", str(kernel.image), "--module", str(path), "--run", "hkm_work", "--arg", "3"],
                   check=False)
        errors = [ln for ln in proc.stderr.splitlines() if "error: " in ln]
        warnings = [ln for ln in proc.stderr.splitlines() if ": warning: " in ln]
        # a file the load would refuse is refused before the kernel starts; a table the kernel refuses is said,
        # and the session goes on (as the console's `module` does) to a --run of a function it never loaded
        before = path in (tmp_path / "missing.ko", kernel.image, tmp_path / "plain.o")
        assert proc.returncode == 2 and said in errors[0] and "Traceback" not in proc.stderr, (path, proc.stderr)
        assert len(errors) == 1 if before else len(errors) == 2 and "no function 'hkm_work'" in errors[1], \
            (path, proc.stderr)
        assert len(errors) + len(warnings) == len(proc.stderr.splitlines())
        assert [reported[path] in w for w in warnings] == ([True] if path in reported else []), proc.stderr
        assert "hkm_work" not in proc.stdout




def relocated(raw: bytes, layout, by: int) -> bytes:
    """A struct of ``layout`` copied ``by`` bytes below where ``raw`` was read: each self-relative s32 field (0
    where it names nothing) made to name what it named."""
    out, offs = bytearray(raw), layout.offsets(64)
    for f in layout.fields:
        for k in range(f.count if f.kind == "s32" else 0):
            at = offs[f.name] + 4 * k
            v = struct.unpack_from("<i", out, at)[0]
            struct.pack_into("<i", out, at, v + by if v else 0)
    return bytes(out)

def test_an_entry_that_starts_before_a_kernel_site_and_reaches_into_it_is_refused(kernel):
    """One fresh entry, a copy of one of the kernel's (form and length; its probe's descriptor copied beside it, so
    that neither the entries nor the descriptors are the kernel's) moved one byte down, given with the kernel's
    text: its bytes [site - 1, site - 1 + length) hold the kernel site's first bytes, though no site holds its
    own first byte. The loader refuses it (SDT_ERR_MODULE_LOADED: the ranges meet, as the table's
    addresses read by the host say) and no entry's state changes."""
    from sdtgen.layout import PROBE, SITE

    s = open_session("emulator", str(kernel.image), Reporter(as_json=True, out=io.StringIO()), modules=True)
    try:
        t = s.target
        size, at = SITE.size(64), SITE.offset("probe", 64)
        sites = t.image.bounds.sites
        code = next(x for x in t.image.elf.sections if x.name == ".text")
        held = [(x.addr, x.addr + (x.size or x.length)) for x in t.runtime.sites]

        def moved(e: int) -> tuple[int, bytes]:
            raw = t.machine.read(e, size)
            return e + struct.unpack_from("<i", raw)[0] - 1, raw

        lone = [(a, raw, e) for e in range(sites[0], sites[1], size) for a, raw in [moved(e)]
                if code.addr <= a and not any(lo <= a < hi for lo, hi in held)]
        assert lone  # a kernel site whose byte before it is no site's
        a, raw, e = lone[-1]
        entry = bytearray(raw)
        fresh, table, copy = t.module_struct() - 4096, t.module_struct() - 2048, t.module_struct() - 1024
        desc, pcopy = e + at + struct.unpack_from("<i", raw, at)[0], copy + size
        struct.pack_into("<ii", entry, 0, a - copy, pcopy - (copy + at))
        for f in ("keep", "state", "size", "next"):  # as gen writes an entry
            entry[SITE.offset(f, 64)] = 0
        t.machine.write(copy, bytes(entry))
        t.machine.write(pcopy, relocated(t.machine.read(desc, PROBE.size(64)), PROBE, desc - pcopy))
        name = pcopy + PROBE.size(64)
        t.machine.write(name, b"moved\0")
        table_naming(t, table, (copy, copy + size), (pcopy, name), name)
        before = [(x.addr, x.state, x.size) for x in t.runtime.sites]
        said = t.runtime.call(t.machine, "sdt_module_load", [fresh, table, code.addr, code.size])
        t.runtime.refresh()
        assert said == VALUES["SDT_ERR_MODULE_LOADED"]
        assert [(x.addr, x.state, x.size) for x in t.runtime.sites] == before
    finally:
        s.close()


def test_a_size_the_table_brings_longer_than_its_entry_is_not_taken_for_a_disabled_form(built, kernel):
    """An entry's size is the runtime's to keep (gen writes 0; a module unloaded and loaded again brings the size
    it was verified at, never more than its length). A table whose call entry (5 bytes, as readelf's
    relocation placed it) says size 6, over code that is the 6-byte NOP x86 disables a 6-byte site with, is
    refused at that entry alone and nothing is written: the byte after the entry's 5 is no site's."""
    from sdtgen.layout import SITE
    from sdtgen.modlink import link_module
    from sdtgen.table import module_sites

    s = open_session("emulator", str(kernel.image), Reporter(as_json=True, out=io.StringIO()), modules=True)
    try:
        t = s.target
        linked = link_module(t.image, str(built / "hkm.ko"), t.module_base)
        for addr, data, _ in linked.segments:
            t.machine.write(addr, data)
        size = SITE.size(64)
        entries = range(linked.bounds.sites[0], linked.bounds.sites[1], size)
        e = next(e for e in entries if t.machine.read(e + SITE.offset("form", 64), 1)[0] == VALUES["SDT_FORM_CALL"])
        site = e + struct.unpack("<i", t.machine.read(e, 4))[0]
        assert t.machine.read(e + SITE.offset("length", 64), 1) == b"\x05"
        nop6 = bytes.fromhex("660f1f440000")  # the 6-byte NOP of the Intel SDM's table of recommended NOPs
        t.machine.write(site, nop6)
        t.machine.write(e + SITE.offset("size", 64), b"\x06")
        said = t.runtime.call(t.machine, "sdt_module_load", [t.module_struct(), linked.table, *linked.text])
        after = t.machine.read(site, 6)
        states = {x.addr: x.state for x in module_sites(t.machine.read, linked.bounds, "hkm", 64)}
    finally:
        s.close()
    assert said >= 0 and states[site] == "refused" and after == nop6
