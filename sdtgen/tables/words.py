"""Arrays of addresses: the shape of ftrace's ``__mcount_loc`` and ``__patchable_function_entries``."""

from __future__ import annotations

from sdtgen.elf.reader import ET_REL, ElfFile
from sdtgen.tables.fields import Fields, Place

MAX_ENTRIES = 4_000_000


def address_array(elf: ElfFile, section: str, bounds: tuple[str, str] | None, what: str) -> list[Place]:
    """Every address in the array: between the linker's bounds symbols when a linked file has them
    (a vmlinux folds ``__mcount_loc`` into its init data), else in every section of that name.
    Zero entries (no relocation, nothing recorded) are not sites and are left out."""
    word = elf.bits // 8
    if bounds is not None and elf.type != ET_REL:
        found = {**elf.symbol_values(bounds[0]), **elf.symbol_values(bounds[1])}
        lo, hi = found.get(bounds[0]), found.get(bounds[1])
        if lo is not None and hi is not None:
            if hi < lo or (hi - lo) % word or (hi - lo) // word > MAX_ENTRIES:
                raise elf.fail(f"damaged {what}: {bounds[0]}..{bounds[1]} spans {lo:#x}..{hi:#x}, "
                               f"not a whole number of {word}-byte addresses", "rebuild the file")
            raw = elf.read_addr(lo, hi - lo) if hi > lo else b""
            order = "little" if elf.little else "big"
            values = (int.from_bytes(raw[i:i + word], order) for i in range(0, len(raw), word))
            return [Place(None, v) for v in values if v]
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
