"""A final kernel image and the probe tables it carries."""

from __future__ import annotations

import bisect
from functools import cached_property

from sdtgen import arch as arches
from sdtgen.elf.reader import ET_REL, STT_FUNC, STT_OBJECT, ElfFile, Symbol
from sdtgen.table import PROBES_SET, SITES_SET, Bounds, TableError, TableProbe, TableSite, read_probes, read_tables


class Image:
    """An executable (or PIE) kernel image, opened for reading."""

    def __init__(self, path: str) -> None:
        self.elf = ElfFile(path)
        if self.elf.type == ET_REL:
            self.elf.close()
            raise self.elf.fail("is a relocatable object, not a linked image",
                                "give the final image (the output of ld -T final.ld)")
        self.arch = arches.for_elf(self.elf)
        self.path = path

    def close(self) -> None:
        self.elf.close()

    def __enter__(self) -> Image:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @cached_property
    def symbols(self) -> dict[str, Symbol]:
        return self.elf.symbol_map()

    @cached_property
    def bounds(self) -> Bounds:
        # The linker's bounds, as a kernel sees them; found without decoding every symbol.
        found = {**self.elf.symbol_values("__start_set_sdt_"), **self.elf.symbol_values("__stop_set_sdt_")}

        def span(set_name: str) -> tuple[int, int]:
            lo, hi = found.get(f"__start_{set_name}"), found.get(f"__stop_{set_name}")
            if lo is None or hi is None:
                raise self.elf.fail(f"has no {set_name} linker set (no __start_/__stop_{set_name} symbols)",
                                    "link the table `sdtgen gen` wrote with sdtgen's final linker script, or "
                                    "INCLUDE sdt_text.ld and sdt_data.ld in yours (`sdtgen linker-script sdt_text "
                                    "--path`)")
            return lo, hi

        return Bounds(span(SITES_SET), span(PROBES_SET))

    def read(self, addr: int, size: int) -> bytes:
        return self.elf.read_addr(addr, size)

    def read_pointer(self, addr: int) -> int:
        return int.from_bytes(self.read(addr, self.arch.bits // 8), "little" if self.elf.little else "big")

    def sites(self) -> list[TableSite]:
        try:
            return read_tables(self.read, self.bounds, self.arch.bits, self.elf.little)
        except TableError as e:
            raise self.elf.fail(f"corrupt probe table: {e}", "regenerate it with `sdtgen gen` and relink") from None

    def probes(self) -> list[TableProbe]:
        try:
            return list(read_probes(self.read, self.bounds.probes, self.arch.bits, self.elf.little).values())
        except TableError as e:
            raise self.elf.fail(f"corrupt probe table: {e}", "regenerate it with `sdtgen gen` and relink") from None

    @cached_property
    def _sorted(self) -> dict[bool, tuple[list[int], list[Symbol]]]:
        """Function symbols, and function and object symbols, sorted by address."""
        out = {}
        for data in (False, True):
            kinds = (STT_FUNC, STT_OBJECT) if data else (STT_FUNC,)
            syms = sorted((s for s in self.symbols.values() if s.type in kinds), key=lambda s: s.value)
            out[data] = ([s.value for s in syms], syms)
        return out

    def symbolize(self, addr: int, data: bool = False) -> str:
        """``function+0xoff`` for an address (with ``data``, objects too), or the bare hex address."""
        starts, syms = self._sorted[data]
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and (syms[i].size == 0 or addr < syms[i].value + syms[i].size):
            return f"{syms[i].name}+{addr - syms[i].value:#x}"
        return f"{addr:#x}"
