"""Where a table's fields point, in a linked file (from the bytes) or a relocatable one (from relocations).

A table entry holds absolute addresses (``.quad func``) or PC-relative offsets (``.long site - .``).
In a linked file both are plain numbers in the section. In a relocatable object the bytes are
placeholders and the truth is the relocation at the field: its symbol's section and value plus
the addend (in the bytes, for REL objects such as i386's). Either way a field resolves to a
``Place``: an address, or a section and offset.
"""

from __future__ import annotations

from sdtgen.elf.reader import ET_DYN, ET_REL, SHN_COMMON, SHN_UNDEF, SHT_RELA, ElfFile, Section
from sdtgen.plaindata import record


@record(frozen=True, order=True)
class Place:
    """A link-time address (section None), an offset in a relocatable object's section, or, for a
    symbol the object does not define, an offset from that symbol (section None, ``symbol`` set)."""

    section: str | None
    value: int
    symbol: str = ""

    def to_json(self) -> int | str:
        return self.value if self.section is None and not self.symbol else str(self)

    def __str__(self) -> str:
        base = self.symbol or self.section
        return f"{self.value:#x}" if base is None else f"{base}+{self.value:#x}"


class Fields:
    """Reads the fields of one table section; ``what`` names the table in diagnostics."""

    def __init__(self, elf: ElfFile, sec: Section, what: str) -> None:
        self.elf, self.sec, self.what = elf, sec, what
        self.data = elf.contents(sec)
        self.relocatable = elf.type == ET_REL
        self.relocs: dict[int, list] = {}
        self.rela = True
        self._dynamic: dict[int, int] | None = None
        from sdtgen import arch

        self.arch = arch.for_machine(elf.machine)  # its data relocations; None: a machine sdtgen has none for
        if self.relocatable:
            self._load_relocs()

    def fail(self, what: str):
        return self.elf.fail(f"damaged {self.what}: {what}", "rebuild the file; its table is damaged")

    def _load_relocs(self) -> None:
        for rsec, target in self.elf.reloc_sections():
            if target.index != self.sec.index:
                continue
            self.rela = rsec.type == SHT_RELA
            for r in self.elf.relocations(rsec):
                self.relocs.setdefault(r.offset, []).append(r)

    def raw(self, off: int, size: int, signed: bool) -> int:
        if off < 0 or off + size > len(self.data):
            raise self.fail(f"a {size}-byte field at offset {off:#x} runs past the {len(self.data)}-byte section")
        return int.from_bytes(self.data[off:off + size], "little" if self.elf.little else "big", signed=signed)

    def absolute(self, off: int, size: int) -> Place | None:
        """An address field; None for a zero field with no relocation (an absent semaphore, say)."""
        if not self.relocatable:
            value = self.raw(off, size, False) or self._relative_addend(off)
            return Place(None, value) if value else None
        return self._relocated(off, size, pcrel=False)

    def _relative_addend(self, off: int) -> int:
        """A shared object's pointer whose bytes the linker left zero (RISC-V's ld does): the addend
        of the R_*_RELATIVE dynamic relocation at it."""
        if self._dynamic is None:
            self._dynamic = {}
            kind = self.arch.relative_reloc if self.arch else None
            # Dynamic relocations patch loaded memory only: a note section's fields have none.
            for rsec in self.elf.sections if self.elf.type == ET_DYN and self.sec.is_alloc else ():
                if rsec.type == SHT_RELA and rsec.is_alloc:  # .rela.dyn (REL files keep the value in place)
                    for r in self.elf.relocations(rsec):
                        if r.type == kind and self.sec.addr <= r.offset < self.sec.addr + self.sec.size:
                            self._dynamic[r.offset - self.sec.addr] = r.addend
        return self._dynamic.get(off, 0)

    def relative(self, off: int, size: int) -> Place:
        """A PC-relative field: the place it points at (field + value)."""
        if not self.relocatable:
            mask = (1 << self.elf.bits) - 1
            return Place(None, (self.sec.addr + off + self.raw(off, size, True)) & mask)
        place = self._relocated(off, size, pcrel=True)
        if place is None:
            raise self.fail(f"the PC-relative field at {self.sec.name}+{off:#x} has no relocation")
        return place

    def _relocated(self, off: int, size: int, pcrel: bool) -> Place | None:
        rels = self.relocs.get(off)
        if not rels:
            if self.raw(off, size, False):
                raise self.fail(f"the field at {self.sec.name}+{off:#x} holds a value but no relocation")
            return None
        kinds = self.arch.data_relocs if self.arch else {}
        pairs = self.arch.data_pairs if self.arch else {}
        if len(rels) == 1 and rels[0].type in kinds:
            r = rels[0]
            rsize, rpc = kinds[r.type]
            if rsize != size or rpc != pcrel:
                raise self.fail(f"relocation type {r.type} at {self.sec.name}+{off:#x} does not fit a "
                                f"{size}-byte {'PC-relative' if pcrel else 'absolute'} field")
            return self._target(r, off, size)
        if pcrel and len(rels) == 2 and {pairs.get(r.type) for r in rels} == {("add", size), ("sub", size)}:
            add = next(r for r in rels if pairs[r.type][0] == "add")
            sub = next(r for r in rels if pairs[r.type][0] == "sub")
            if self._target(sub, off, size) != Place(self.sec.name, off):
                raise self.fail(f"the label difference at {self.sec.name}+{off:#x} is not relative to its field")
            return self._target(add, off, size)
        types = ", ".join(str(r.type) for r in rels)
        raise self.fail(f"relocation type {types} at {self.sec.name}+{off:#x} is not one sdtgen reads in a table")

    def _target(self, r, off: int, size: int) -> Place:
        addend = r.addend if self.rela else self.raw(off, size, True)
        if r.sym == 0:
            return Place(None, addend)
        symbols = self.elf.symbols
        if r.sym >= len(symbols):
            raise self.fail(f"the relocation at {self.sec.name}+{off:#x} names symbol {r.sym}, "
                            f"but there are only {len(symbols)}")
        sym = symbols[r.sym]
        if sym.shndx == SHN_UNDEF or (sym.special and sym.shndx == SHN_COMMON):
            return Place(None, addend, sym.name)  # resolved only at link time
        if sym.special:  # SHN_ABS and the other reserved indexes: a plain value
            return Place(None, sym.value + addend)
        return Place(self.elf.section_at(sym.shndx).name, sym.value + addend)
