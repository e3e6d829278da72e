"""Arrays of addresses: the shape of ftrace's ``__mcount_loc`` and ``__patchable_function_entries``."""

from __future__ import annotations

from sdtgen.elf.linkerset import linker_set
from sdtgen.elf.reader import ET_REL, ElfFile
from sdtgen.tables.fields import Fields, Place

MAX_ENTRIES = 4_000_000


def address_array(elf: ElfFile, section: str, set_name: str | None, what: str) -> list[Place]:
    """Every address in the array: in the linker set ``set_name`` when a linked file has its bounds
    (a vmlinux folds ``__mcount_loc`` into its init data), else in every section of that name.
    Zero entries (no relocation, nothing recorded) are not sites and are left out."""
    word = elf.bits // 8
    found = linker_set(elf, set_name, section) if set_name is not None and elf.type != ET_REL else None
    if found is not None and not found.by_section:  # a stripped file's sections are read below
        lo, hi = found.span
        if hi < lo or (hi - lo) % word or (hi - lo) // word > MAX_ENTRIES:
            raise elf.fail(f"damaged {what}: __start_{set_name}..__stop_{set_name} spans {lo:#x}..{hi:#x}, "
                           f"not a whole number of {word}-byte addresses", "rebuild the file")
        raw = elf.read_addr(lo, hi - lo) if hi > lo else b""
        return [Place(None, v) for (v,) in elf.layout.word.iter_unpack(raw) if v]
    out = []
    for sec in elf.sections:
        if sec.name != section:
            continue
        fields = Fields(elf, sec, what)
        if len(fields.data) % word:
            raise fields.fail(f"section {sec.name} is {len(fields.data)} bytes, not a whole number of "
                              f"{word}-byte addresses")
        for off in range(0, len(fields.data), word):
            place = fields.absolute(off, word)
            if place is not None:
                out.append(place)
    return out
