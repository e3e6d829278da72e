"""Boot-time patching by the image's own runtime (sdt_init): every verified site becomes its NOP or return;
anything else is refused, reported and left as it is."""

from __future__ import annotations

import json
import shutil
import struct

from booted import Booted
from helpers import corrupt_site_entry, sdtgen
from native_oracle import Call

from sdtgen.elf.reader import ElfFile
from sdtgen.table import SITE_SIZE


def test_every_site_is_patched_to_a_nop_capstone_decodes(booted, kernel):
    scanned = json.loads(sdtgen("scan", kernel.partial, "--json", check=True).stdout)["sites"]
    sites = booted.session.target.runtime.sites
    assert len(sites) == len(scanned) == 21 and {s.state for s in sites} == {"off"}
    cs = booted.session.image.arch.disassembler()
    for site in sites:
        now = booted.session.target.machine.read(site.addr, site.size)
        first = next(cs.disasm(now, site.addr))
        assert site.size == site.length == 5
        if site.form == "call":
            assert (first.mnemonic, first.size) == ("nop", 5)
        else:
            assert first.mnemonic == "ret"  # then NOPs no CPU reaches
        # What was there is what the image file holds: the call (or jump) to this probe's stub.
        original = next(cs.disasm(booted.session.image.read(site.addr, 5), site.addr))
        assert original.mnemonic == ("call" if site.form == "call" else "jmp")
        assert int(original.op_str, 16) == site.probe.stub


def test_armed_site_holds_int3_and_disarmed_site_the_nop(booted):
    (site,) = [s for s in booted.session.target.runtime.sites if s.probe.spec == "hk:vfs:lookup:entry"]
    disabled = booted.session.target.machine.read(site.addr, 5)
    booted.session.enable("hk:vfs:lookup:entry")
    assert booted.session.target.machine.read(site.addr, 5) == b"\xcc" + disabled[1:]
    booted.session.disable("hk:vfs:lookup:entry")
    assert booted.session.target.machine.read(site.addr, 5) == disabled == bytes.fromhex("0f1f440000")


def test_a_site_whose_bytes_differ_is_refused_left_alone_and_the_rest_work(kernel, tmp_path):
    image = tmp_path / "tampered.elf"
    shutil.copy(kernel.image, image)
    with ElfFile(kernel.image) as elf:
        start = elf.symbol_map()["__start_set_sdt_sites_set"].value
        sec = elf.section("set_sdt_sites_set")
        text = elf.section(".text")
        # Entry 4 is hk:vfs:lookup:entry (scan order); find its site and break the call there.
        field = start + 4 * SITE_SIZE
        (rel,) = struct.unpack_from("<i", elf.data, sec.offset + field - sec.addr)
        site = field + rel
        file_off = text.offset + site - text.addr
    data = bytearray(image.read_bytes())
    data[file_off:file_off + 5] = bytes.fromhex("0f1f440000")  # not the promised call
    image.write_bytes(data)
    b = Booted(image)
    try:
        (patched,) = [e for e in b.events() if e["event"] == "patched"]
        assert patched == {"event": "patched", "sites": 20, "refused": 1, "folded": 0}
        b.session.enable("hk:vfs:lookup:*")
        assert b.session.target.machine.read(site, 5) == bytes.fromhex("0f1f440000")  # untouched, never armed
        events = b.run([Call("vfs_lookup_id", (0,))])
        assert [e["probe"] for e in events if e["event"] == "fire"] == [
            "hk:vfs:lookup:component", "hk:vfs:lookup:return"]
    finally:
        b.session.close()


def test_a_corrupt_entry_is_refused_and_reported(kernel, tmp_path):
    image = corrupt_site_entry(kernel.image, tmp_path / "corrupt.elf", 0, 2)
    proc = sdtgen("boot", image, "--run", "kmain", "--arg", "1")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0
    assert lines[0] == "patched 20 sites (1 refused)"
    (refused,) = proc.stderr.splitlines()
    assert refused.startswith(f"{image}: warning: .text:kmain+0x") and ": refused hk:::boot: is not the expected " \
        "call or jump to its stub (found " in refused and refused.endswith("; left unpatched")
    assert lines[-1].startswith("kmain(1) = ")


def test_offset_mode_image_whose_text_moved_patches_nothing_wrong(kernel_offset, tmp_path):
    from helpers import final_link

    partial = tmp_path / "kernel.o"
    shutil.copy(kernel_offset.partial, partial)
    image = final_link(tmp_path, partial, mode="offset", order="stubs-first")
    b = Booted(image)
    try:
        (patched,) = [e for e in b.events() if e["event"] == "patched"]
        # Each entry points 0x120-ish bytes off its site: nothing there verifies, nothing is written.
        assert patched["sites"] == 0 and patched["refused"] == 21
        with ElfFile(image) as elf:
            text = elf.section(".text")
            assert b.session.target.machine.read(text.addr, text.size) == bytes(elf.contents(text))
    finally:
        b.session.close()
