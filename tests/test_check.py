"""sdtgen check: every site is where the image's table says, or exit 1 naming it."""

from __future__ import annotations

import json
import re
import shutil
import struct
from collections import Counter

import pytest
from helpers import corrupt_site_entry, final_link, final_script, readelf_probe_relocs, run, sdtgen
from tables import readelf

from sdtgen.layout import SITE
from sdtgen.table import SITE_SIZE


def functions_with_sites(obj) -> Counter:
    """'.text:function' -> how many probe calls it makes, from readelf's symbols and relocations."""
    funcs = []
    for line in run(["readelf", "-sW", str(obj)]).stdout.splitlines():
        f = line.split()
        if len(f) == 8 and f[3] == "FUNC" and f[6] != "UND":
            funcs.append((int(f[1], 16), int(f[2]), f[7]))
    out = Counter()
    for section, offset, _, _ in readelf_probe_relocs(obj):
        name = next(n for v, size, n in funcs if v <= offset < v + size)
        out[f"{section}:{name}"] += 1
    return out


def test_check_passes_on_the_fixture_image(kernel):
    proc = sdtgen("check", kernel.partial, kernel.image)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{kernel.image}: 21 sites (table mode reloc): 21 stable, 0 moved, 0 missing"
    report = json.loads(sdtgen("check", kernel.partial, kernel.image, "--json").stdout)
    assert report["ok"] and report["stable"] == 21


def table_addresses(image) -> list[int]:
    """Each site entry's address, decoded from the set_sdt_sites_set bytes readelf shows (s32 site - &site)."""
    ((start, data),) = readelf.contents(image, "set_sdt_sites_set")
    return [start + off + readelf.words(data[off:off + 4], 4, signed=True)[0]
            for off in range(0, len(data), SITE_SIZE)]


@pytest.mark.parametrize("corrupt", [(), (3, 9, 17)], ids=["as-built", "three-entries-off"])
def test_a_site_is_stable_exactly_when_objdump_shows_its_call_at_the_table_address(kernel, tmp_path, corrupt):
    """Independent truth for check: the image's table (readelf) and, at each address, objdump's
    disassembly before any boot: the call or jump to the probe's stub (an is-enabled call to its own).
    Entries moved two bytes off their sites point at no such instruction, and only they fail."""
    image = kernel.image
    for index in corrupt:
        image = corrupt_site_entry(image, tmp_path / f"corrupt{index}.elf", index, 2)
    report = json.loads(sdtgen("check", kernel.partial, image, "--json").stdout)
    assert [s["address"] for s in report["sites"]] == table_addresses(image)
    scanned = json.loads(sdtgen("scan", kernel.partial, "--json").stdout)["sites"]
    mnemonic = {"call": "call", "isen": "call", "tail": "jmp", "cond": "j"}
    shown = []
    for site, verdict in zip(scanned, report["sites"], strict=True):
        addr = verdict["address"]
        dump = run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={addr:#x}",
                    f"--stop-address={addr + site['length']:#x}", str(image)]).stdout
        insn = [ln for ln in dump.splitlines() if re.match(rf"\s*{addr:x}:", ln)]
        shown.append(bool(insn) and re.search(rf":\s+(cs )?{mnemonic[site['form']]}\S*\s+[0-9a-f]+ "
                                              rf"<{site['symbol']}>$", insn[0]) is not None)
    assert [v["status"] == "stable" for v in report["sites"]] == shown
    assert [i for i, ok in enumerate(shown) if not ok] == list(corrupt)


def test_check_quiet_prints_nothing_when_stable(kernel):
    proc = sdtgen("check", "--quiet", kernel.partial, kernel.image)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""


def test_offset_mode_holds_when_the_final_link_keeps_text_in_place(kernel_offset):
    assert sdtgen("check", kernel_offset.partial, kernel_offset.image).returncode == 0


def test_check_fails_on_a_corrupted_table_entry(kernel, tmp_path):
    image = corrupt_site_entry(kernel.image, tmp_path / "corrupt.elf", 6, 3)
    proc = sdtgen("check", kernel.partial, image)
    assert proc.returncode == 1
    sites = json.loads(sdtgen("scan", kernel.partial, "--json").stdout)["sites"]
    bad = sites[6]
    (line,) = [ln for ln in proc.stderr.splitlines() if ": error: .text:" in ln]
    assert line.startswith(f"{image}: error: .text:{bad['function']}: {bad['probe']} moved by -0x3: ")
    assert line.endswith("; the table is corrupt: rerun `sdtgen gen` and relink")
    report = json.loads(sdtgen("check", kernel.partial, image, "--json").stdout)
    assert [s["status"] for s in report["sites"]].count("moved") == 1 and not report["ok"]


def test_check_fails_in_offset_mode_when_text_moved_after_the_partial_link(kernel_offset, tmp_path):
    """The open question of the 2015 design: stubs linked first shift every site."""
    partial = tmp_path / "kernel.o"
    shutil.copy(kernel_offset.partial, partial)
    image = final_link(tmp_path, partial, mode="offset", order="stubs-first")
    proc = sdtgen("check", partial, image)
    assert proc.returncode == 1
    report = json.loads(sdtgen("check", partial, image, "--json").stdout)
    deltas = {s["delta"] for s in report["sites"]}
    assert report["moved"] == 21 and len(deltas) == 1 and deltas.pop() > 0
    assert "offset mode cannot follow" in proc.stderr and "use --mode reloc" in proc.stderr
    # One line per function holding sites, objtool's way, with how many more sites it has.
    lines = [ln for ln in proc.stderr.splitlines() if ": error: .text:" in ln]
    per_function = functions_with_sites(partial)
    assert sorted(ln.split(": ")[2].partition("+")[0] for ln in lines) == sorted(per_function)
    for ln in lines:
        n = per_function[ln.split(": ")[2].partition("+")[0]]
        assert (f"(and {n - 1} more sites in this function)" in ln) == (n > 1), ln
    assert any(ln.split(": ")[2].startswith(".text:proc_exit+0x") and "hk:proc:exit:done moved by +0x" in ln
               for ln in lines)


def test_reloc_mode_survives_the_same_reordering(kernel, tmp_path):
    partial = tmp_path / "kernel.o"
    shutil.copy(kernel.partial, partial)
    image = final_link(tmp_path, partial, mode="reloc", order="stubs-first")
    assert sdtgen("check", partial, image).returncode == 0


def test_check_rejects_a_table_from_another_object(kernel, tmp_path):
    from helpers import compile_c, partial_link

    other = partial_link(tmp_path, "other", compile_c(tmp_path, "o", "int f(void) { return 1; }\n"))
    proc = sdtgen("check", other, kernel.image)
    assert proc.returncode == 1 and "has 21 site entries but" in proc.stderr


def test_check_on_an_image_without_tables(tmp_path):
    from helpers import compile_c, run

    obj = compile_c(tmp_path, "plain", "int kmain(void) { return 0; }\n")
    image = tmp_path / "plain.elf"
    run(["ld", "-e", "kmain", "-o", str(image), str(obj)])
    proc = sdtgen("check", obj, image)
    assert proc.returncode == 2
    assert "has no set_sdt_sites_set linker set" in proc.stderr and "sdtgen gen" in proc.stderr


class CountingList(list):
    """A list that counts how often it is walked from the start."""

    walks = 0

    def __iter__(self):
        CountingList.walks += 1
        return super().__iter__()


def test_image_reads_use_one_index_by_address_not_a_walk_over_every_section(kernel, tmp_path):
    """20,000 sections x 2,000 probes took 24 s when every read walked the sections; reads must not."""
    from helpers import compile_c, run

    from sdtgen.check import check
    from sdtgen.image import Image
    from sdtgen.scan import scan

    # 1,500 extra loaded sections: orphans the final script places after the kernel's own.
    body = "\n".join(f'__attribute__((used, section("s{i}"))) const int c{i} = {i};' for i in range(1500))
    extra = compile_c(tmp_path, "many", body + "\n")
    script = final_script(tmp_path / "final.ld")
    image = tmp_path / "many.elf"
    parts = ("stubs", "table", "rt_sdt_runtime", "rt_arch")  # what the fragment compiles beside the kernel
    run(["ld", "-T", script, "-o", str(image), str(kernel.partial),
         *(str(kernel.dir / f"kernel_sdt_{part}.o") for part in parts), str(extra)])
    sections = int(run(["readelf", "-hW", str(image)]).stdout.split("Number of section headers:")[1].split()[0])
    assert sections > 1500
    result = scan(str(kernel.partial))
    with Image(str(image)) as img:
        img.elf.sections = CountingList(img.elf.sections)
        CountingList.walks = 0
        report = check(result, img)
        probes = img.probes()
    assert report.ok and report.count("stable") == 21 and len(probes) == 18
    assert CountingList.walks < 10  # a handful of setup walks, none per read


def test_a_long_name_from_the_file_is_cut_and_sdtgens_own_words_are_not(tmp_path):
    """A 230-character probe spec is shown to 200 characters; the sentence around it stays whole."""
    from helpers import compile_c, partial_link

    provider, module = "p" * 150, "m" * 70
    obj = compile_c(tmp_path, "long", f"""#include <sdt.h>
SDT_PROBE_DEFINE1({provider}, {module}, f, n, "int");
int f(int x) {{ SDT_PROBE1({provider}, {module}, f, n, x); return x + 1; }}
""")
    partial = partial_link(tmp_path, "kernel", obj)
    image = corrupt_site_entry(final_link(tmp_path, partial), tmp_path / "corrupt.elf", 0, 3)
    proc = sdtgen("check", partial, image)
    assert proc.returncode == 1
    (line,) = [ln for ln in proc.stderr.splitlines() if ": error: .text:f+" in ln]
    spec = f"{provider}:{module}:f:n"
    assert f": {spec[:200]}...({len(spec) - 200} more characters) moved by -0x3: the table entry points at `" in line
    assert line.endswith("; the table is corrupt: rerun `sdtgen gen` and relink")


# -- the asm goto form: the table against the image's own records ----------------------------------------
def goto_table(image) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
    """From the bytes objdump dumps: each site entry's (site, target) (s32 fields relative to themselves,
    target at SITE's offset), and each asm goto record's patch point -> target (FreeBSD's absolute words)."""
    ((start, data),) = readelf.contents(image, "set_sdt_sites_set")
    at = SITE.offset("target", 64)
    entries = {}
    for off in range(0, len(data), SITE_SIZE):
        site = start + off + readelf.words(data[off:off + 4], 4, signed=True)[0]
        rel = readelf.words(data[off + at:off + at + 4], 4, signed=True)[0]
        entries[off // SITE_SIZE] = (site, start + off + at + rel if rel else 0)
    ((_, raw),) = readelf.contents(image, "set_sdt_tracepoint_set")
    records = {patch: target for _, patch, target, _ in zip(*[iter(readelf.words(raw, 8))] * 4, strict=True)}
    return entries, records


def corrupt_target(image, out, index: int, delta: int):
    from sdtgen.elf.reader import ElfFile

    with ElfFile(image) as elf:
        offset = elf.section("set_sdt_sites_set").offset + SITE_SIZE * index + SITE.offset("target", 64)
    data = bytearray(image.read_bytes())
    struct.pack_into("<i", data, offset, struct.unpack_from("<i", data, offset)[0] + delta)
    out.write_bytes(data)
    return out


def five_nops_at(image, out, index: int):
    """A copy of ``image`` whose site ``index`` holds FreeBSD's five 1-byte NOPs instead of sdt.h's one."""
    from sdtgen.image import Image

    with Image(str(image)) as img:
        entry = img.sites()[index].addr
        sec = img.section_at(entry)
        offset = sec.offset + entry - sec.addr
    data = bytearray(image.read_bytes())
    data[offset:offset + 5] = b"\x90" * 5
    out.write_bytes(data)
    return out


@pytest.mark.parametrize("sites, targets, nops", [((), (), ()), ((2, 11), (), ()), ((), (4, 15), ()),
                                                  ((), (), (7,))],
                         ids=["as-built", "two-sites-off", "two-targets-off", "five-nops"])
def test_a_goto_site_is_stable_exactly_when_objdump_shows_its_nop_and_its_record_has_the_tables_target(
        arch_kernel, tmp_path, sites, targets, nops):
    """Independent truth: objdump's disassembly at each entry's address (the asm goto's one 5-byte NOP), and
    the image's set_sdt_tracepoint_set as objdump dumps it (FreeBSD's {probe, patch point, target, 0}): an
    entry moved off its NOP, one whose target is not its record's, or a NOP that is not the one, fails; only
    those."""
    k = arch_kernel("x86_64", FORM="goto")
    image = k.image
    for index in sites:
        image = corrupt_site_entry(image, tmp_path / f"site{index}.elf", index, 2)
    for index in targets:
        image = corrupt_target(image, tmp_path / f"target{index}.elf", index, 1)
    for index in nops:
        image = five_nops_at(image, tmp_path / f"nops{index}.elf", index)
    report = json.loads(sdtgen("check", k.partial, image, "--json").stdout)
    scanned = json.loads(sdtgen("scan", k.partial, "--json").stdout)["sites"]
    entries, records = goto_table(image)
    assert sum(s["form"] == "goto" for s in scanned) == len(records) == 20  # and the direct call of lib.c
    truth = []
    for i, site in enumerate(scanned):
        addr, target = entries[i]
        dump = run(["objdump", "-d", f"--start-address={addr:#x}", f"--stop-address={addr + site['length']:#x}",
                    str(image)]).stdout
        insn = [ln for ln in dump.splitlines() if re.match(rf"\s*{addr:x}:", ln)]
        if site["form"] == "goto":
            truth.append(bool(insn) and re.search(r":\s+0f 1f 44 00 00\s+nopl\s+0x0\(%rax,%rax,1\)$", insn[0])
                         is not None and records.get(addr) == target)
        else:
            truth.append(bool(insn) and f"<{site['symbol']}>" in insn[0])
    assert [v["status"] == "stable" for v in report["sites"]] == truth
    assert [i for i, ok in enumerate(truth) if not ok] == sorted((*sites, *targets, *nops))
    assert report["ok"] == (not sites and not targets and not nops)


def test_a_goto_image_whose_records_were_dropped_fails_check_naming_them(arch_kernel, tmp_path):
    k = arch_kernel("x86_64", FORM="goto")
    image = tmp_path / "norecords.elf"
    run(["objcopy", "--remove-section", "set_sdt_tracepoint_set", str(k.image), str(image)])
    proc = sdtgen("check", k.partial, image)
    assert proc.returncode == 1
    assert "no asm goto record in set_sdt_tracepoint_set has the patch point" in proc.stderr
    assert "INCLUDE sdt_data.ld" in proc.stderr
