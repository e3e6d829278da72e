"""FreeBSD 15's asm-goto probe records, the linker set ``set_sdt_tracepoint_set``.

Each record is four words, as FreeBSD's ``struct sdt_tracepoint`` starts::

    probe       the probe's descriptor (sdt.h names sdt_<prov>_<mod>_<func>_<name>)
    patchpoint  the NOP the asm goto put in the code
    target      the asm goto's label: the out-of-line code that evaluates the arguments and fires
    0           (FreeBSD's list link)

The asm writes them with no alignment of the section. In a relocatable object every word is a
relocation: against the probe's symbol; against a section symbol plus an addend for the other two
on x86 and AArch64, or a local label symbol on RISC-V (whose relaxation moves code, so its
assembler keeps the label); with the addend in the word itself in a REL object (i386). In a linked
image the words are addresses.
"""

from __future__ import annotations

from sdtgen.elf.reader import ET_REL, SHN_UNDEF, SHT_NOBITS, SHT_RELA, ElfFile, Section
from sdtgen.errors import SdtError, place, printable
from sdtgen.plaindata import record

SET = "set_sdt_tracepoint_set"
PROBE_PREFIX = "sdt_"  # the probe word's symbol: the stub's, without __dtrace_
STUB_PREFIX = "__dtrace_"
FIELDS = ("probe", "patch point", "target")
FIX = "rebuild the object; the asm goto records in set_sdt_tracepoint_set are damaged"


def record_size(bits: int) -> int:
    return 4 * (bits // 8)


def stub_symbol(probe_symbol: str) -> str:
    """The stub symbol (what the call form calls and gen defines) of a record's probe word."""
    return STUB_PREFIX + probe_symbol


def probe_word_symbol(stub: str) -> str:
    """What a record's probe word names, for a probe whose stub is ``stub``."""
    return stub[len(STUB_PREFIX):]


@record(frozen=True)
class Tracepoint:
    """One record of a relocatable object: where it is, and the places its words name."""

    section: Section  # the record's own section
    offset: int  # of the record in it
    probe: str  # the probe word's symbol
    probe_defined: bool  # the object defines that symbol itself (FreeBSD's own struct sdt_probe)
    patch: tuple[int, int]  # (section index, offset) of the NOP
    target: tuple[int, int]  # (section index, offset) of the out-of-line code
    reloc: int  # the relocation type of the patch point's word

    @property
    def where(self) -> str:
        return place(self.section.name, None, self.offset)


def object_records(elf: ElfFile, abs_word: int) -> list[Tracepoint]:
    """Every record of the object's tracepoint sections, read through their relocations. ``abs_word``:
    the architecture's absolute pointer relocation, the only one the asm's words get."""
    out = []
    for sec in elf.sections:
        if sec.name == SET:
            out += _section_records(elf, sec, abs_word)
    return out


def _section_records(elf: ElfFile, sec: Section, abs_word: int) -> list[Tracepoint]:
    word = elf.bits // 8
    size = record_size(elf.bits)
    if sec.type == SHT_NOBITS or not sec.is_alloc:
        raise elf.fail(f"{SET} holds no loaded data, so it carries no asm goto records", FIX, where=sec.name)
    if sec.size % size:
        raise elf.fail(f"{SET} is {sec.size} bytes, not a whole number of {size}-byte asm goto records", FIX,
                       where=sec.name)
    data = elf.contents(sec)
    relocs: dict[int, list] = {}
    rela = True
    for rsec, target in elf.reloc_sections():
        if target.index == sec.index:
            rela = rsec.type == SHT_RELA
            for r in elf.relocations(rsec):
                relocs.setdefault(r.offset, []).append(r)
    st = elf.symtab
    nsyms = st.size // st.entsize if st is not None and st.entsize else 0
    symbols: dict[int, object] = {}  # decoded as needed: a kernel object has hundreds of thousands
    order = "little" if elf.little else "big"
    out = []
    for base in range(0, sec.size, size):
        where = place(SET, None, base)
        resolved = []
        for k, what in enumerate(FIELDS):
            off = base + k * word
            rels = relocs.get(off, [])
            if len(rels) != 1:
                raise elf.fail(f"the {what} word of the asm goto record at {where} has "
                               f"{'no relocation' if not rels else f'{len(rels)} relocations'}", FIX, where=where)
            r = rels[0]
            if r.type != abs_word:
                raise elf.fail(f"the {what} word of the asm goto record at {where} is relocated by type {r.type}, "
                               f"not the absolute word ({abs_word}) an asm goto's record has", FIX, where=where)
            if not 0 < r.sym < nsyms:
                raise elf.fail(f"the {what} word of the asm goto record at {where} names symbol {r.sym}, which "
                               "the object does not have", FIX, where=where)
            sym = symbols.get(r.sym) or symbols.setdefault(r.sym, elf.symbol(r.sym))
            addend = r.addend if rela else int.from_bytes(data[off:off + word], order, signed=True)
            resolved.append((sym, addend))
        last = base + 3 * word
        if last in relocs or any(data[last:last + word]):
            raise elf.fail(f"the last word of the asm goto record at {where} is not 0", FIX, where=where)
        (probe, probe_add), patch, target = resolved
        if probe.shndx != SHN_UNDEF and probe.special:
            raise elf.fail(f"the probe word of the asm goto record at {where} names {printable(probe.name)}, "
                           "which is no probe", FIX, where=where)
        if probe_add or not probe.name.startswith(PROBE_PREFIX):
            raise elf.fail(f"the probe word of the asm goto record at {where} names "
                           f"{printable(probe.name)}{f'{probe_add:+#x}' if probe_add else ''}, not a probe "
                           f"({PROBE_PREFIX}<provider>_<module>_<function>_<name>)",
                           "fire probes through sdt.h's SDT_PROBE macros", where=where)
        spots = [_code_place(elf, sym, add, what, where) for (sym, add), what in zip((patch, target), FIELDS[1:],
                                                                                      strict=True)]
        if spots[0] == spots[1]:
            raise elf.fail(f"the asm goto record at {where} jumps from its patch point to itself", FIX, where=where)
        out.append(Tracepoint(sec, base, probe.name, probe.shndx != SHN_UNDEF, spots[0], spots[1],
                              relocs[base + word][0].type))
    return out


def _code_place(elf: ElfFile, sym, addend: int, what: str, where: str) -> tuple[int, int]:
    """(section index, offset) a word names: a section symbol, or a label, plus the addend; in code."""
    if sym.shndx == SHN_UNDEF or sym.special:
        raise elf.fail(f"the {what} of the asm goto record at {where} is {printable(sym.name)}, outside the "
                       "object's code", FIX, where=where)
    sec = elf.section_at(sym.shndx)
    off = sym.value + addend
    if not sec.is_exec or not 0 <= off < sec.size:
        raise elf.fail(f"the {what} of the asm goto record at {where} is {sec.name}+{off:#x}, not in code", FIX,
                       where=where)
    return sec.index, off


@record(frozen=True)
class ImageTracepoint:
    """One record of a linked image: the addresses its words hold."""

    addr: int  # of the record
    probe: int
    patch: int
    target: int


def image_records(elf: ElfFile, read, bits: int) -> list[ImageTracepoint]:
    """The records of a linked image, through ``read(addr, size)`` (an Image's, which applies a PIE's
    RELATIVE relocations). The set's bounds, or its section; none when the image has neither."""
    from sdtgen.elf.linkerset import linker_set

    if elf.type == ET_REL:
        raise SdtError(elf.path, "is a relocatable object: its records are read through relocations")
    found = linker_set(elf, SET)
    if found is None:
        sec = elf.section(SET)
        if sec is None or not sec.is_alloc or sec.type == SHT_NOBITS:
            return []
        lo, hi = sec.addr, sec.addr + sec.size
    else:
        lo, hi = found.span
    word, size = bits // 8, record_size(bits)
    if hi < lo or (hi - lo) % size:
        raise elf.fail(f"{SET} spans {lo:#x}..{hi:#x}, not a whole number of {size}-byte asm goto records",
                       "relink with sdtgen's linker scripts (sdt_data.ld aligns and bounds the set)")
    raw = read(lo, hi - lo) if hi > lo else b""
    order = "little" if elf.little else "big"
    out = []
    for at in range(0, hi - lo, size):
        probe, patch, target = (int.from_bytes(raw[at + k * word:at + (k + 1) * word], order) for k in range(3))
        out.append(ImageTracepoint(lo + at, probe, patch, target))
    return out
