"""Append symbols to a relocatable object, leaving every other byte where it was.

Reloc-mode tables point at each site through a hidden global symbol placed on
the site's instruction ("anchor"), so the final linker resolves the entry
wherever it moves the code, including when relaxation deletes bytes before
it. The new string table, symbol table (and its extended-index table) are
appended to the file with a new section header table; the old copies stay in
place as unused bytes, so no file offset inside the object changes.
"""

from __future__ import annotations

from sdtgen.elf.reader import (
    SHN_LORESERVE,
    SHN_XINDEX,
    SHT_SYMTAB_SHNDX,
    STB_GLOBAL,
    STT_NOTYPE,
    STV_HIDDEN,
    ElfFile,
)
from sdtgen.plaindata import record


@record(frozen=True)
class NewSymbol:
    name: str
    shndx: int
    value: int
    type: int = STT_NOTYPE  # sdtgen's anchors are STT_SECTION: see codegen.ANCHOR_TYPE


def add_symbols(elf: ElfFile, new: list[NewSymbol]) -> bytearray:
    """The bytes of ``elf`` with ``new`` appended as hidden global symbols (of each one's type)."""
    st = elf.symtab
    if st is None:
        raise elf.fail("has no symbol table", "give the output of ld -r, which always has one")
    strsec = elf.section_at(st.link)
    xsec = next((s for s in elf.sections if s.type == SHT_SYMTAB_SHNDX and s.link == st.index), None)
    lay = elf.layout
    strtab = bytearray(elf.contents(strsec))
    symtab = bytearray(elf.contents(st))
    xtab = bytearray(elf.contents(xsec)) if xsec else None
    nsyms = len(symtab) // st.entsize
    need_x = any(s.shndx >= SHN_LORESERVE for s in new)
    if need_x and xtab is None:
        xtab = bytearray(4 * nsyms)
    for s in new:
        info = (STB_GLOBAL << 4) | s.type
        name_off = len(strtab)
        strtab += s.name.encode("ascii") + b"\0"
        shndx = SHN_XINDEX if s.shndx >= SHN_LORESERVE else s.shndx
        symtab += lay.pack_sym(name_off, info, STV_HIDDEN, shndx, s.value, 0)
        if xtab is not None:
            xtab += lay.u32.pack(s.shndx if shndx == SHN_XINDEX else 0)

    out = bytearray(elf.data)
    moved: dict[int, tuple[int, int]] = {}

    def append(blob: bytes | bytearray, align: int) -> int:
        out.extend(b"\0" * (-len(out) % align))
        off = len(out)
        out.extend(blob)
        return off

    moved[strsec.index] = (append(strtab, 1), len(strtab))
    moved[st.index] = (append(symtab, 8 if elf.is64 else 4), len(symtab))
    if xtab is not None and xsec is not None:
        moved[xsec.index] = (append(xtab, 4), len(xtab))
    # A fresh extended-index section would need a new section header: kernel
    # objects past 65280 sections already carry one, so refuse the rare rest.
    if xtab is not None and xsec is None:
        raise elf.fail("needs an extended section index table to add anchor symbols",
                       "use --mode offset, or partial-link with the sdtgen partial linker script")

    shdr = lay.shdr
    table = bytearray()
    count = len(elf.sections)
    raw = elf.data[elf.shoff:elf.shoff + count * shdr.size]
    for i, row in enumerate(shdr.iter_unpack(raw)):
        fields = list(row)
        if i in moved:
            fields[4], fields[5] = moved[i]
        table += shdr.pack(*fields)
    shoff = append(table, 8)
    lay.word.pack_into(out, lay.shoff_at, shoff)
    return out  # not bytes(out): a kernel object is tens of megabytes, one copy is enough
