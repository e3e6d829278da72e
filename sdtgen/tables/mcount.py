"""ftrace's call sites: ``__mcount_loc``, one address per traced function (gcc -pg -mrecord-mcount).

A vmlinux keeps the array between ``__start_mcount_loc`` and ``__stop_mcount_loc`` (inside its
init data); a user program or a relocatable object (vmlinux.o) keeps the ``__mcount_loc`` section.
ftrace names each site by the function that holds it, as available_filter_functions shows.
"""

from __future__ import annotations

from sdtgen.elf.reader import ElfFile
from sdtgen.tables.model import TableSite
from sdtgen.tables.symbols import CODE, Namer
from sdtgen.tables.words import address_array

SECTION = "__mcount_loc"
SET = "mcount_loc"  # __start_mcount_loc, __stop_mcount_loc


def read(elf: ElfFile, names: Namer | None = None) -> list[TableSite]:
    places = address_array(elf, SECTION, SET, "ftrace table __mcount_loc")
    names = names or Namer(elf, CODE)
    out = []
    for place in places:
        func = names.name(place)
        out.append(TableSite("mcount", "ftrace", func, func or str(place), place))
    return out

