"""Linux jump labels: ``__jump_table``, an array of ``struct jump_entry``.

With relative entries (x86, arm64, riscv and others since Linux 5.x) each entry is::

    s32  code     the patchable instruction - &code
    s32  target   the branch target - &target
    long key      the static_key - &key; bits 0 and 1 are flags (branch default, linked)

so an entry is 8 bytes plus one word, aligned to the word. The key's symbol names the probe.
"""

from __future__ import annotations

from sdtgen.elf.linkerset import linker_set
from sdtgen.elf.reader import ET_REL, ElfFile
from sdtgen.tables.fields import Fields, Place
from sdtgen.tables.model import TableSite
from sdtgen.tables.symbols import CODE, DATA, Namer

SECTION = "__jump_table"
SET = SECTION  # __start___jump_table, __stop___jump_table
FLAGS = 3


def read(elf: ElfFile, names: Namer | None = None, keys: Namer | None = None) -> list[TableSite]:
    names = names or Namer(elf, CODE)
    keys = keys or Namer(elf, DATA)
    out = []
    for fields, lo, hi in _arrays(elf):
        size = 8 + elf.bits // 8
        if (hi - lo) % size:
            raise fields.fail(f"{SECTION} holds {hi - lo} bytes, not a whole number of {size}-byte entries")
        for off in range(lo, hi, size):
            code = fields.relative(off, 4)
            fields.relative(off + 4, 4)  # the target: checked, not listed
            key = fields.relative(off + 8, size - 8)
            key = Place(key.section, key.value & ~FLAGS, key.symbol)
            found = keys.lookup(key)
            name = (found[0] if not found[1] else f"{found[0]}+{found[1]:#x}") if found else str(key)
            out.append(TableSite("jump", "jump_label", names.name(code), name, code))
    return out


def _arrays(elf: ElfFile):
    """(fields, first offset, end offset) of each jump table: the linker's bounds in a linked file,
    every ``__jump_table`` section otherwise."""
    found = linker_set(elf, SET) if elf.type != ET_REL else None
    if found is not None and not found.by_section:  # a stripped file's sections are read below
        lo, hi = found.span
        sec = next((s for s in elf.sections if s.is_alloc and s.addr <= lo and hi <= s.addr + s.size
                    and s.size), None)
        if sec is None or hi < lo:
            raise elf.fail(f"damaged jump table: __start_{SET}..__stop_{SET} ({lo:#x}..{hi:#x}) is not inside "
                           "one section", "rebuild the file")
        return [(Fields(elf, sec, "jump table"), lo - sec.addr, hi - sec.addr)]
    return [(Fields(elf, s, "jump table"), 0, s.size) for s in elf.sections if s.name == SECTION]
