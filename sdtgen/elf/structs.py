"""The ELF structures, one ``struct.Struct`` each per class (32/64-bit) and byte order.

The reader, the writer and the table readers all pack and unpack through these, so a field's
width and order are written down once. Symbols are the one structure whose field order differs
between the classes; ``sym_row`` and ``pack_sym`` give every caller the 64-bit order.
"""

from __future__ import annotations

import struct

IDENT_SIZE = 16  # e_ident: the header's fields start after it


class Layout:
    """The structures of one ELF class and byte order."""

    def __init__(self, is64: bool, little: bool) -> None:
        e = "<" if little else ">"
        self.is64, self.little = is64, little
        self.endian = e
        self.word = struct.Struct(e + ("Q" if is64 else "I"))  # an address or offset
        self.u32 = struct.Struct(e + "I")
        # The header after e_ident: type, machine, version, entry, phoff, shoff, flags, ehsize,
        # phentsize, phnum, shentsize, shnum, shstrndx.
        self.ehdr = struct.Struct(e + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH"))
        self.shoff_at = IDENT_SIZE + (24 if is64 else 16)  # e_shoff's file offset
        # name, type, flags, addr, offset, size, link, info, addralign, entsize (the same order in both).
        self.shdr = struct.Struct(e + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII"))
        self.sym = struct.Struct(e + ("IBBHQQ" if is64 else "IIIBBH"))
        # type, flags, offset, vaddr, paddr, filesz, memsz, align (64-bit; 32-bit keeps flags after memsz).
        self.phdr = struct.Struct(e + ("IIQQQQQQ" if is64 else "IIIIIIII"))
        self.rel = struct.Struct(e + ("QQ" if is64 else "II"))  # offset, info
        self.rela = struct.Struct(e + ("QQq" if is64 else "IIi"))  # offset, info, addend
        # ch_type, (reserved,) ch_size, ch_addralign: the header of an SHF_COMPRESSED section.
        self.chdr = struct.Struct(e + ("IIQQ" if is64 else "III"))
        self.nhdr = struct.Struct(e + "III")  # namesz, descsz, type
        self.r_shift, self.r_mask = (32, 0xFFFFFFFF) if is64 else (8, 0xFF)
        # Where r_info's symbol index lies in a relocation row, and how many bytes it takes.
        word = 8 if is64 else 4
        self.r_sym_at = word + (4 if is64 else 1) if little else word
        self.r_sym_width = 4 if is64 else 3

    def sym_row(self, row: tuple) -> tuple[int, int, int, int, int, int]:
        """(name, info, other, shndx, value, size) of an unpacked symbol, whichever the class."""
        if self.is64:
            return row
        return row[0], row[3], row[4], row[5], row[1], row[2]

    def sym_rows(self, data):
        """Every symbol of a table's bytes, as ``sym_row`` gives them."""
        rows = self.sym.iter_unpack(data)
        if self.is64:
            return rows
        return ((n, i, o, x, v, s) for n, v, s, i, o, x in rows)

    def pack_sym(self, name: int, info: int, other: int, shndx: int, value: int, size: int) -> bytes:
        if self.is64:
            return self.sym.pack(name, info, other, shndx, value, size)
        return self.sym.pack(name, value, size, info, other, shndx)

    def reloc(self, rela: bool) -> struct.Struct:
        return self.rela if rela else self.rel


_LAYOUTS: dict[tuple[bool, bool], Layout] = {}


def layout(is64: bool, little: bool) -> Layout:
    found = _LAYOUTS.get((is64, little))
    if found is None:
        found = _LAYOUTS[is64, little] = Layout(is64, little)
    return found
