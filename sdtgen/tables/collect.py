"""Every probe table of one file, read with one open and one set of symbol lookups."""

from __future__ import annotations

from sdtgen.elf.linkerset import linker_set
from sdtgen.elf.reader import ET_REL, ElfFile
from sdtgen.tables import KINDS
from sdtgen.tables.model import TableSite


def read_tables(path: str, kinds: tuple[str, ...] = KINDS) -> list[TableSite]:
    from sdtgen.tables import jump, mcount, patchable, stapsdt
    from sdtgen.tables.symbols import CODE, DATA, Namer

    readers = {"stapsdt": stapsdt.read, "mcount": mcount.read, "patchable": patchable.read}
    with ElfFile(path) as elf:
        code: Namer | None = None
        out: list[TableSite] = []
        for kind in kinds:
            if not _has(elf, kind):
                continue
            code = code or Namer(elf, CODE)
            if kind == "jump":
                out += jump.read(elf, code, Namer(elf, DATA))
            else:
                out += readers[kind](elf, code)
        return out


def _has(elf: ElfFile, kind: str) -> bool:
    """Whether the file carries the table at all (cheap: section names and a symbol-name search)."""
    from sdtgen.tables import jump, mcount, patchable, stapsdt

    section = {"stapsdt": stapsdt.NOTE_SECTION, "mcount": mcount.SECTION, "patchable": patchable.SECTION,
               "jump": jump.SECTION}[kind]
    if any(s.name == section for s in elf.sections):
        return True
    set_name = {"mcount": mcount.SET, "jump": jump.SET}.get(kind)
    return bool(set_name and elf.type != ET_REL and linker_set(elf, set_name, section))
