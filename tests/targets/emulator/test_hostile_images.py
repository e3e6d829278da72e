"""Images crafted from a real gcc + GNU ld image (crafted_images.py, beside this file) that the boot must refuse
or survive.

Each expectation is checked against readelf's reading of the crafted file, not sdtgen's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

from crafted_images import PF_R, PF_W, PF_X, Load, point_site_entry, set_site_length, with_loads, with_relative_reloc
from helpers import SDTGEN, run, sdtgen

from sdtgen.elf.reader import ElfFile
from sdtgen.limits import MAX_MAPPED, MAX_SEGMENTS
from sdtgen.table import SITE_SIZE


def readelf_loads(image) -> list[tuple[int, int, int, str]]:
    """(vaddr, filesz, memsz, flags) of each LOAD, per readelf -lW."""
    out = []
    for line in run(["readelf", "-lW", str(image)]).stdout.splitlines():
        f = line.split()
        if f[:1] == ["LOAD"]:
            out.append((int(f[2], 16), int(f[4], 16), int(f[5], 16), "".join(f[6:-1])))
    return out


def events(proc) -> list[dict]:
    return [json.loads(line) for line in proc.stdout.splitlines()]


def text_of(image) -> tuple[int, int, int]:
    """.text's address, file offset and size; the probe's stub address."""
    with ElfFile(image) as elf:
        text = elf.section(".text")
        stub = elf.symbol_map()["__dtrace_sdt_tk_code_probed_entry"].value
        return text.addr, text.offset, stub


def test_a_call_in_a_non_executable_segment_below_the_text_is_not_patched(tricks, tmp_path):
    addr, offset, stub = text_of(tricks)
    bad = with_loads(tricks, tmp_path / "data-below.elf",
                     [Load(addr - 16, 16, PF_R, offset=offset - 16, filesz=16, align=16)])
    data = bytearray(bad.read_bytes())
    call = b"\xe8" + (stub - (addr - 16) - 5).to_bytes(4, "little", signed=True)
    data[offset - 16:offset - 11] = call  # the promised call, but in read-only data
    bad.write_bytes(data)
    point_site_entry(bad, 0, addr - 16)
    assert (addr - 16, 16, 16, "R") in readelf_loads(bad)  # readelf: a read-only segment right below the text
    proc = sdtgen("boot", bad, "--json", "--run", "read_at", "--arg", str(addr - 16))
    ev = events(proc)
    assert ev[0] == {"event": "patched", "sites": 0, "refused": 1, "folded": 0}
    assert ev[1]["reason"] == "is not in the kernel's text (or runs past its end)"
    # The guest reads its data unchanged: the call's bytes and what follows them in the file.
    value = int.from_bytes(bytes(data[offset - 16:offset - 8]), "little", signed=True)
    assert ev[2] == {"event": "return", "symbol": "read_at", "value": value}


def test_too_many_segments_are_refused_at_once(tricks, tmp_path):
    loads = [Load(0x4000_0000 + 0x2000 * i, 0x1000) for i in range(4000)]
    bad = with_loads(tricks, tmp_path / "many.elf", loads)
    total = len(readelf_loads(tricks)) + 4000
    assert len(readelf_loads(bad)) == total
    proc = sdtgen("boot", bad)
    assert proc.returncode == 2 and proc.stderr == (
        f"{bad}: error: has {total} loadable segments, more than the {MAX_SEGMENTS} a boot maps; "
        "link the kernel into a few segments\n")


def test_as_many_segments_as_allowed_boot(tricks, tmp_path):
    loads = [Load(0x4000_0000 + 0x2000 * i, 0x1000) for i in range(MAX_SEGMENTS - len(readelf_loads(tricks)))]
    ok = with_loads(tricks, tmp_path / "most.elf", loads)
    assert len(readelf_loads(ok)) == MAX_SEGMENTS
    proc = sdtgen("boot", ok, "--run", "probed:int", "--arg", "1", "--run", "read_at", "--arg", "0x40002000")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1:] == ["probed(1) = 42", f"read_at({0x40002000}) = 0"]


def test_chained_bss_segments_past_the_memory_bound_are_refused(tricks, tmp_path):
    size = 255 << 20
    loads = [Load(0x4000_0000 + size * i, size, PF_R | PF_W | PF_X) for i in range(16)]
    bad = with_loads(tricks, tmp_path / "chain.elf", loads)
    assert bad.stat().st_size < 1 << 20 and sum(m for _, _, m, _ in readelf_loads(bad)) > 16 * size  # small
    proc = sdtgen("boot", bad)
    assert proc.returncode == 2 and "cannot be loaded" in proc.stderr and f"{MAX_MAPPED >> 20} MiB" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


def test_chained_bss_within_the_bound_costs_no_memory_until_touched(tricks, tmp_path):
    size = 100 << 20
    loads = [Load(0x4000_0000 + size * i, size, PF_R | PF_W | PF_X) for i in range(4)]  # 400 MiB of bss
    ok = with_loads(tricks, tmp_path / "chain-ok.elf", loads)
    # The peak resident size of the boot alone, from the kernel's accounting of a child that ran it.
    probe = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True);"
             "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, SDTGEN, "boot", str(ok), "--run", "read_at", "--arg",
                          str(0x4000_0000 + 3 * size + 8)], capture_output=True, text=True, check=True).stdout
    code, max_kib = map(int, out.split())
    assert code == 0 and max_kib < 200 * 1024  # far below the 400 MiB mapped


def test_overlapping_segments_are_refused(tricks, tmp_path):
    addr, offset, _ = text_of(tricks)
    bad = with_loads(tricks, tmp_path / "overlap.elf", [Load(addr + 0x10, 0x10, PF_R, offset=offset, filesz=0x10)])
    proc = sdtgen("boot", bad)
    assert proc.returncode == 2 and f"segment at {addr + 0x10:#x} overlaps the segment before it" in proc.stderr


def test_a_relative_relocation_outside_memory_names_the_relocation(tricks, tmp_path):
    bad = with_relative_reloc(tricks, tmp_path / "rela.elf", ".comment", 0x1234)
    readelf = run(["readelf", "-rW", str(bad)]).stdout
    assert re.search(r"^0*1234\s+0*8\s+R_X86_64_RELATIVE\s", readelf, re.M)  # readelf sees the crafted entry
    proc = sdtgen("boot", bad)
    assert proc.returncode == 2 and proc.stderr == (
        f"{bad}: error: relocation 0 in .comment (R_X86_64_RELATIVE) is at 0x1234, outside every loaded segment; "
        "relink the image\n")


def test_a_sixteen_byte_site_is_refused_for_what_it_is(tricks, tmp_path):
    inside = tmp_path / "long-site.elf"
    shutil.copy(tricks, inside)
    set_site_length(inside, 0, 16)
    (refused,) = [e for e in events(sdtgen("boot", inside, "--json")) if e["event"] == "refused"]
    assert refused["reason"] == "is not the expected call or jump to its stub"
    at_end = tmp_path / "long-site-at-end.elf"
    shutil.copy(inside, at_end)
    (text_load,) = [seg for seg in readelf_loads(tricks) if "E" in seg[3]]
    point_site_entry(at_end, 0, text_load[0] + text_load[1] - 8)  # 16 bytes run past the segment's file bytes
    (refused,) = [e for e in events(sdtgen("boot", at_end, "--json")) if e["event"] == "refused"]
    assert refused["reason"] == "is not in the kernel's text (or runs past its end)"


def test_a_guest_write_to_the_return_page_faults_and_later_runs_work(tricks):
    proc = sdtgen("boot", tricks, "--run", "poke", "--arg", "-0xff0", "--arg", "7", "--run", "probed:int",
                  "--arg", "1", "--run", "probed:int", "--arg", "2")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[1:] == ["probed(1) = 42", "probed(2) = 42"]
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"{tricks}: error: .text:poke+0x") and line.endswith(
        "fault in poke: write to 0xfffffffffffff010 in the return page, which the guest may not write "
        "(last probe fired: none)")


def test_refused_sites_are_summarised_per_function(kernel, tmp_path):
    bad = tmp_path / "all-refused.elf"
    shutil.copy(kernel.image, bad)
    with ElfFile(bad) as elf:
        kmain = elf.symbol_map()["kmain"].value
        count = elf.section("set_sdt_sites_set").size // SITE_SIZE
    for i in range(count):
        point_site_entry(bad, i, kmain + 1)  # every entry: one byte into kmain, where no call starts
    proc = sdtgen("boot", bad)
    lines = proc.stderr.splitlines()
    assert len(lines) == 4 and all(ln.startswith(f"{bad}: warning: .text:kmain+0x1: refused ") for ln in lines[:3])
    assert lines[3] == f"{bad}: warning: {count - 3} more refused sites not shown; see all of them with --json"
    refused = [e for e in events(sdtgen("boot", bad, "--json")) if e["event"] == "refused"]
    assert len(refused) == count == 21 and {e["pc"] for e in refused} == {kmain + 1}


def test_a_segment_where_the_boot_keeps_its_return_page_is_refused(tricks, tmp_path):
    bad = with_loads(tricks, tmp_path / "top.elf", [Load(0xFFFF_FFFF_FFFF_F000, 0x1000)])
    assert (0xFFFF_FFFF_FFFF_F000, 0, 0x1000, "RW") in readelf_loads(bad)
    proc = sdtgen("boot", bad)
    assert proc.returncode == 2 and proc.stderr == (
        f"{bad}: error: the return page at 0xfffffffffffff000 overlaps segments at 0xfffffffffffff000; "
        "relink the image\n")
