"""SystemTap/USDT probes: the ``stapsdt`` notes of ``.note.stapsdt`` (sys/sdt.h).

Each note (type 3, owner "stapsdt") describes one site: three address-sized words (the site,
the link-time address of ``.stapsdt.base``, the semaphore or 0), then the provider, the name and
the argument specs, each NUL-terminated. When a tool such as prelink moved the file after the
note was written, ``.stapsdt.base``'s address differs from the note's base and every site and
semaphore moves by the difference, as systemtap, bpftrace and bcc read them.
"""

from __future__ import annotations

import re

from sdtgen.elf.reader import ElfFile
from sdtgen.probes import listed_name
from sdtgen.tables.fields import Fields, Place
from sdtgen.tables.model import ArgSpec, TableSite
from sdtgen.tables.symbols import CODE, Namer

NOTE_SECTION = ".note.stapsdt"
BASE_SECTION = ".stapsdt.base"
NT_STAPSDT = 3
OWNER = b"stapsdt\0"
_SPEC = re.compile(r"(-?)(1|2|4|8|16)(f?)@(.+)", re.S)
_ARG = re.compile(r"\S*\[[^\]]*\]|\S+")  # AArch64 writes memory operands as [sp, 16], with a space


def read(elf: ElfFile, names: Namer | None = None) -> list[TableSite]:
    sec = elf.section(NOTE_SECTION)
    if sec is None:
        return []
    fields = Fields(elf, sec, f"USDT note in {NOTE_SECTION}")
    base_sec = elf.section(BASE_SECTION)
    names = names or Namer(elf, CODE)
    word = elf.bits // 8
    align = 8 if sec.align == 8 else 4
    data, off, out = fields.data, 0, []
    while off < len(data):
        if off + 12 > len(data):
            raise fields.fail(f"the note header at offset {off:#x} is truncated")
        namesz, descsz, ntype = elf.layout.nhdr.unpack_from(data, off)
        name_at = off + 12
        desc_at = name_at + _up(namesz, align)
        end = desc_at + _up(descsz, align)
        if desc_at + descsz > len(data):
            raise fields.fail(f"the note at offset {off:#x} claims {namesz}+{descsz} bytes, past the section's end")
        if ntype == NT_STAPSDT and bytes(data[name_at:name_at + namesz]) == OWNER:
            out.append(_site(fields, base_sec, desc_at, descsz, word))
        off = min(end, len(data))
    return [site.named(name) for site, name in zip(out, names.names([s.place for s in out]), strict=True)]


def _up(n: int, align: int) -> int:
    return (n + align - 1) & ~(align - 1)


def _site(fields: Fields, base_sec, at: int, size: int, word: int) -> TableSite:
    """The note's site, its function not yet named (``read`` names every note's at once)."""
    if size < 3 * word:
        raise fields.fail(f"the note descriptor at offset {at:#x} is {size} bytes, shorter than its 3 addresses")
    pc = fields.absolute(at, word) or Place(None, 0)
    base = fields.absolute(at + word, word)
    semaphore = fields.absolute(at + 2 * word, word)
    strings = bytes(fields.data[at + 3 * word:at + size])
    parts = strings.split(b"\0")
    if len(parts) < 4 or parts[3:] != [b""] * (len(parts) - 3):
        raise fields.fail(f"the note descriptor at offset {at:#x} does not hold provider, name and arguments, "
                          "each ending in a NUL")
    provider, raw_name, args = (p.decode("utf-8", "backslashreplace") for p in parts[:3])
    if base_sec is not None and base is not None and base.section is None and not fields.relocatable:
        delta = base_sec.addr - base.value  # the file moved after the notes were written (prelink)
        mask = (1 << fields.elf.bits) - 1  # address arithmetic wraps at the address width
        pc = Place(None, (pc.value + delta) & mask)
        if semaphore is not None:
            semaphore = Place(None, (semaphore.value + delta) & mask)
    return TableSite("stapsdt", provider, "", listed_name(raw_name), pc, raw_name, parse_args(args), semaphore)


def parse_args(text: str) -> tuple[ArgSpec, ...]:
    """``-4@%edi 8@16(%rsp)`` -> specs; a spec without a size keeps its whole text as the location."""
    out = []
    for spec in _ARG.findall(text):
        m = _SPEC.fullmatch(spec)
        if m:
            out.append(ArgSpec(spec, int(m.group(2)), m.group(1) == "-", m.group(4), m.group(3) == "f"))
        else:
            out.append(ArgSpec(spec, None, False, spec))
    return tuple(out)
