"""A final kernel image and the probe tables it carries."""

from __future__ import annotations

import bisect

from sdtgen import arch as arches
from sdtgen.elf.linkerset import STRIPPED_FIX, linker_set, stripped
from sdtgen.elf.reader import ET_REL, PF_X, PT_LOAD, SHT_NOBITS, SHT_RELA, ElfFile, Symbol
from sdtgen.elf.symbols import CODE, DATA, SymbolIndex
from sdtgen.errors import place, printable
from sdtgen.plaindata import cached, record
from sdtgen.table import PROBES_SET, SITES_SET, Bounds, TableError, TableProbe, TableSite, read_probes, read_tables


@record(frozen=True)
class CodeSpan:
    """The bytes an executable segment holds in the file: the only bytes a site (or a stub) may be in."""

    start: int
    end: int


def code_spans(elf: ElfFile) -> list[CodeSpan]:
    """The executable segments' file bytes, in address order, narrowed to their executable sections when the
    image has section headers: a linker that puts text and data in one RWX segment (GNU ld without -z
    separate-code) leaves the site table and the runtime's data beside the code, and those are written, not
    code."""
    spans = sorted((s.vaddr, s.vaddr + s.filesz) for s in elf.segments
                   if s.type == PT_LOAD and s.flags & PF_X and s.filesz)
    texts = sorted((s.addr, s.addr + s.size) for s in elf.sections
                   if s.is_alloc and s.is_exec and s.size and s.type != SHT_NOBITS)
    if texts:
        spans = [(max(a, lo), min(b, hi)) for lo, hi in spans for a, b in texts if max(a, lo) < min(b, hi)]
    return [CodeSpan(lo, hi) for lo, hi in spans]


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

    @cached
    def symbols(self) -> dict[str, Symbol]:
        return self.elf.symbol_map()

    @cached
    def bounds(self) -> Bounds:
        """The two sets' linker bounds, as a kernel sees them; by section in a stripped image."""

        def span(set_name: str) -> tuple[int, int]:
            found = linker_set(self.elf, set_name)
            if found is not None:
                return found.span
            if stripped(self.elf):
                raise self.elf.fail(f"is stripped (no symbol table) and has no {set_name} section either, so its "
                                    "probe table cannot be found", STRIPPED_FIX)
            raise self.elf.fail(f"has no {set_name} linker set (no __start_/__stop_{set_name} symbols)",
                                "link the table `sdtgen gen` wrote with sdtgen's final linker script, or "
                                "INCLUDE sdt_text.ld and sdt_data.ld in yours (`sdtgen linker-script sdt_text "
                                "--path`)")

        return Bounds(span(SITES_SET), span(PROBES_SET))

    def read(self, addr: int, size: int) -> bytes:
        """Bytes as loaded: a PIE's pointers hold what its RELATIVE relocations put there (lld leaves the
        field 0 and the value in the RELA addend), as the boot loader applies them before anything reads."""
        data = self.elf.read_addr(addr, size)
        offsets, values = self._loaded_pointers
        i = bisect.bisect_left(offsets, addr - self.arch.bits // 8 + 1)
        if i == len(offsets) or offsets[i] >= addr + size:
            return data
        out, width = bytearray(data), self.arch.bits // 8
        for off, value in zip(offsets[i:], values[i:], strict=True):
            if off >= addr + size:
                break
            word = value.to_bytes(width, "little" if self.elf.little else "big")
            lo, hi = max(off, addr), min(off + width, addr + size)
            out[lo - addr:hi - addr] = word[lo - off:hi - off]
        return bytes(out)

    @cached
    def _loaded_pointers(self) -> tuple[list[int], list[int]]:
        """Sorted addresses of RELA RELATIVE relocations in allocated sections, and the pointers they hold."""
        found = {}
        mask = (1 << self.arch.bits) - 1
        for sec in self.elf.sections:
            if sec.type == SHT_RELA and sec.is_alloc:
                found.update((r.offset, r.addend & mask) for r in self.elf.relocations(sec)
                             if r.type == self.arch.relative_reloc)
        offsets = sorted(found)
        return offsets, [found[o] for o in offsets]

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

    def check_bootable(self, probes: list[TableProbe]) -> None:
        """Refuse, before anything runs, a table a boot would trip over: the site table left out of the link,
        the stubs object left out (its stubs and recorders then resolve outside the code: to 0 when the link
        let undefined symbols pass), or two probes listed under one name (firings are told apart by it)."""
        lo, hi = self.bounds.sites
        if hi == lo and any(n.startswith("__dtrace_sdt_") for n in self.elf.symbol_values("__dtrace_sdt_")):
            raise self.elf.fail("has probe stubs but an empty site table: the table `sdtgen gen` wrote "
                                "(set_sdt_sites_set) was not linked", "link the *_sdt_table.o gen's output "
                                "compiles to (the Makefile fragment does)")
        outside = [(p, what, addr) for p in probes for what, addr in
                   (("stub", p.stub), ("is-enabled stub", p.isenabled), ("recorder", p.recorder))
                   if (addr or what == "stub") and not self.in_code(addr)]
        if outside:
            p, what, addr = outside[0]
            others = len({q.addr for q, _, _ in outside}) - 1
            more = f" (and {others} more probes)" if others > 1 else " (and 1 more probe)" if others else ""
            raise self.elf.fail(f"the {what} of probe {printable(p.spec)} is at {addr:#x}, outside the image's "
                                f"code{more}: the stubs object `sdtgen gen` wrote was not linked",
                                "link the *_sdt_stubs.o its --stubs output compiles to (the Makefile fragment does)",
                                where=self.where(p.addr)[0])
        named: dict[str, TableProbe] = {}
        for p in probes:
            first = named.setdefault(p.spec, p)
            if first is not p:
                raise self.elf.fail(f"the probes of stubs {printable(self._name(p.stub))} and "
                                    f"{printable(self._name(first.stub))} (at {self.where(first.addr)[0]}) both "
                                    f"list as {printable(p.spec)}, so their firings could not be told apart",
                                    "rename one and rebuild: `sdtgen gen` refuses this in one object, `sdtgen check "
                                    "OBJECTS... IMAGE` across the objects of one image", where=self.where(p.addr)[0])

    def _name(self, addr: int) -> str:
        """A function's name for its address (``function+0xoff`` inside one, the bare hex address outside)."""
        return self.symbolize(addr).removesuffix("+0x0")

    @cached
    def code(self) -> list[CodeSpan]:
        return code_spans(self.elf)

    def in_code(self, addr: int) -> bool:
        """Whether ``addr`` is in the bytes of the image's code (code_spans)."""
        i = bisect.bisect_right([c.start for c in self.code], addr) - 1
        return i >= 0 and addr < self.code[i].end

    @cached
    def _index(self) -> dict[bool, SymbolIndex]:
        return {False: SymbolIndex(self.elf, CODE), True: SymbolIndex(self.elf, CODE + DATA)}

    def symbolize(self, addr: int, data: bool = False) -> str:
        """``function+0xoff`` for an address (with ``data``, objects too), or the bare hex address."""
        return self._index[data].name(addr)

    @cached
    def _sections(self) -> tuple[list[int], list]:
        secs = sorted((s for s in self.elf.sections if s.is_alloc and s.size), key=lambda s: s.addr)
        return [s.addr for s in secs], secs

    def section_at(self, addr: int):
        """The allocated section holding ``addr``, or None."""
        starts, secs = self._sections
        i = bisect.bisect_right(starts, addr) - 1
        return secs[i] if i >= 0 and addr < secs[i].addr + secs[i].size else None

    def where(self, addr: int) -> tuple[str, str]:
        """(``section:function+0xoff`` of an address in the one diagnostic shape, the function's name;
        the section's name outside every function, and '' outside every section)."""
        section = self.section_at(addr)
        found = self._index[False].containing(addr)
        if found is not None:
            name, off = found
            return (place(section.name, name, off) if section else f"{name}+{off:#x}"), name
        if section is not None:
            return place(section.name, None, addr - section.addr), section.name
        return f"{addr:#x}", ""
