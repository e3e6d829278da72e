"""Relocations against probe symbols in a relocatable object -> sites."""

from __future__ import annotations

from sdtgen import arch as arches
from sdtgen.arch.base import CALL, GOTO, ISEN, REF, Arch, UnsupportedReloc
from sdtgen.elf.reader import ET_REL, SHT_NOBITS, ElfFile, Section
from sdtgen.elf.symbols import CODE, SymbolIndex
from sdtgen.errors import SdtError, place, printable
from sdtgen.plaindata import factory, record
from sdtgen.probes import (
    DEFAULT_PREFIX,
    DESC_SECTION,
    ISENABLED_PREFIX,
    DescriptorConflict,
    DescriptorError,
    Probe,
    Site,
    parse_descriptors,
    probe_from_symbol,
    probe_key,
    probe_symbol,
)
from sdtgen.tracepoints import SET as TRACEPOINT_SET

LTO_HOWTO = ("partial-link LTO objects to machine code: `gcc -r -flinker-output=nolto-rel` for GCC, "
             "`ld.lld -r` for clang -flto")


@record
class ScanResult:
    object: str
    arch: Arch
    sites: list[Site]
    probes: dict[str, Probe]  # by symbol: every probe the object calls or describes
    defined: set[str] = factory(set)  # probe symbols the object defines itself
    section_index: dict[str, int] = factory(dict)  # name -> index of the sections with sites

    JSON_KEYS = ("probe", "symbol", "section", "offset", "text_offset", "reloc", "form", "length", "function",
                 "detail", "target_section", "target")

    def write_json(self, out) -> None:
        """{"object", "arch", "sites": [...]}, one site at a time: no 20,000 dicts held at once."""
        import json

        head = json.dumps({"object": self.object, "arch": self.arch.name})[:-1]
        out.write(f'{head}, "sites": [')
        for i, s in enumerate(self.sites):
            out.write((", " if i else "") + json.dumps({k: getattr(s, k) for k in self.JSON_KEYS}))
        out.write("]}\n")


def merged(results: list[ScanResult]) -> ScanResult:
    """Several generated objects linked into one image, as one: their sites in link order."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    for r in results[1:]:
        if r.arch.name != first.arch.name:
            raise SdtError(r.object, f"is {r.arch.name} but {first.object} is {first.arch.name}",
                           "give objects of one image")
    probes: dict[str, Probe] = {}
    owner: dict[str, str] = {}
    named: dict[str, str] = {}  # spec -> the stub symbol listed under it
    for r in results:
        for sym, p in r.probes.items():
            known = probes.setdefault(sym, p)
            owner.setdefault(sym, r.object)
            if known != p and known.described and p.described:
                raise SdtError(r.object, f"defines probe {printable(p.spec)} ({_args(p)}) with stub symbol "
                               f"{printable(sym)}, which {owner[sym]} defines as {printable(known.spec)} "
                               f"({_args(known)})", "define each probe once, with one list of argument types "
                               "and names that make distinct stub symbols")
            other = named.setdefault(p.spec, sym)
            if other != sym:
                raise SdtError(r.object, f"stub symbol {printable(sym)} lists as probe {printable(p.spec)}, as "
                               f"stub symbol {printable(other)} of {owner[other]} does, so their firings could "
                               "not be told apart", NAME_FIX)
    return ScanResult(", ".join(r.object for r in results), first.arch, [s for r in results for s in r.sites],
                      probes, set().union(*(r.defined for r in results)))


def _args(probe: Probe) -> str:
    return printable(", ".join(probe.args)) or "no arguments"


def open_relocatable(path: str) -> ElfFile:
    """Open ``path`` and insist on a relocatable object that holds machine code."""
    _reject_bitcode(path)
    elf = ElfFile(path)
    try:
        if elf.type != ET_REL:
            raise elf.fail(f"is {'an' if elf.type_name[0] in 'aeiou' else 'a'} {elf.type_name}, not a relocatable"
                           " object",
                           "give the output of the partial link (ld -r), not the final image")
        _reject_ir_only(elf)
    except BaseException:
        elf.close()
        raise
    return elf


def _reject_bitcode(path: str) -> None:
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # never wait on a FIFO
    except OSError:
        return  # ElfFile reports it
    try:
        head = os.pread(fd, 4, 0) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    if head in (b"BC\xc0\xde", b"\xde\xc0\x17\x0b"):
        raise SdtError(path, "is LLVM bitcode (clang -flto), not machine code", LTO_HOWTO)


def _reject_ir_only(elf: ElfFile) -> None:
    lto = any(s.name.startswith((".gnu.lto_", ".llvm.lto", ".llvmbc")) for s in elf.sections)
    code = any(s.is_exec and s.size and s.type != SHT_NOBITS for s in elf.sections)
    if lto and not code:
        raise elf.fail("holds only compiler IR (LTO), no machine code or relocations to scan", LTO_HOWTO)


def scan(path: str, prefix: str = DEFAULT_PREFIX) -> ScanResult:
    with open_relocatable(path) as elf:
        return scan_elf(elf, prefix)


def _symbols_exist(elf: ElfFile, rsec, target) -> None:
    """Refuse a relocation naming a symbol past .symtab: which symbol it meant is lost, so a probe site behind it
    would be dropped without a word (a damaged or hand-edited object)."""
    count = elf.symtab.size // elf.symtab.entsize if elf.symtab and elf.symtab.entsize else 0
    top = elf.largest_symbol(rsec)
    if top >= count:
        r = elf.relocations(rsec, {top})[0]
        raise elf.fail(f"a relocation in {printable(rsec.name)} names symbol {top}, past the {count} symbols of "
                       ".symtab, so what it refers to (maybe a probe site) is unknown",
                       "the object is damaged; rebuild it", where=place(target.name, None, r.offset))


def scan_elf(elf: ElfFile, prefix: str = DEFAULT_PREFIX) -> ScanResult:
    arch = arches.for_elf(elf)
    probes, defined_at = read_descriptors(elf)
    wanted = elf.symbol_indices_with_prefix(prefix)
    if prefix == DEFAULT_PREFIX:  # SDT_PROBE_ENABLED()'s calls, by the same scan
        wanted.update(elf.symbol_indices_with_prefix(ISENABLED_PREFIX))
    defined = {name for i, name in wanted.items() if elf.symbol_defined(i)}
    found = []  # (section, relocation, its symbol's name): named once all are known
    symtab = elf.symtab.index if elf.symtab else -1
    for rsec, target in elf.reloc_sections():
        if not target.is_alloc or target.type == SHT_NOBITS or rsec.link != symtab:
            continue  # debug info and other non-loaded data never holds a site
        _symbols_exist(elf, rsec, target)
        for r in elf.relocations(rsec, wanted):
            if r.offset >= target.size:
                raise elf.fail(f"a relocation against {printable(wanted[r.sym])} lies outside its section",
                               "the object is damaged; rebuild it", where=place(target.name, None, r.offset))
            found.append((target, r, wanted[r.sym]))
    records = _tracepoints(elf, arch) if prefix == DEFAULT_PREFIX else []
    code_sections = {target.index for target, _, _ in found} | {i for tp in records for i, _ in (tp.patch, tp.target)}
    funcs = SymbolIndex(elf, CODE, code_sections)
    sites: list[Site] = []
    owners: dict[str, tuple[str, str]] = {}  # symbol -> (its probe's symbol, the probe's spec), once each
    codes: dict[int, memoryview] = {}
    reloc_names: dict[int, str] = {}
    for target, r, sym in found:  # the loop of a kernel's tens of thousands of sites: lookups kept flat
        shndx, offset = target.index, r.offset
        code = codes.get(shndx)
        if code is None:
            code = codes[shndx] = elf.contents(target)
        try:
            shape = arch.classify(code, offset, r.type, target.is_exec,
                                  lambda: funcs.preceding(offset, shndx) or 0)  # noqa: B023 (called at once)
        except UnsupportedReloc:
            raise elf.fail(f"{arch.reloc_name(r.type)} against {printable(sym)} is not a relocation sdtgen "
                           "understands", "compile probe sites as direct calls (see README, 'Diagnostics')",
                           where=section_place(funcs, target, offset)) from None
        form, detail = shape.form, shape.detail
        known = owners.get(sym)
        if known is None:
            owner = probe_symbol(sym)
            probe = probes.get(owner) or probes.setdefault(owner, probe_from_symbol(owner, prefix))
            known = owners[sym] = (owner, probe.spec)
        if known[0] != sym:  # an is-enabled check: patchable only as a plain call
            form = ISEN if form == CALL else REF
            detail = "is-enabled call" if form == ISEN else f"is-enabled reference by {detail}"
        rname = reloc_names.get(r.type) or reloc_names.setdefault(r.type, arch.reloc_name(r.type))
        start = shape.start
        sites.append(Site(known[1], sym, target.name, start, start if target.name == ".text" else None, rname,
                          form, shape.length, detail, funcs.name(start, shndx)))
    sites += _goto_sites(elf, arch, records, funcs, probes, prefix)
    sites.sort(key=lambda s: (s.section != ".text", s.section, s.offset))
    _check_one_name_each(elf, probes, sites, defined_at)
    by_name = {target.name: target.index for target, _, _ in found}
    by_name.update((elf.section_at(i).name, i) for i in code_sections)
    return ScanResult(elf.path, arch, sites, probes, defined, by_name)


def _tracepoints(elf: ElfFile, arch: Arch) -> list:
    if elf.section(TRACEPOINT_SET) is None:
        return []
    from sdtgen.tracepoints import object_records

    return object_records(elf, arch.abs_word)


def _goto_sites(elf: ElfFile, arch: Arch, records: list, funcs: SymbolIndex, probes: dict[str, Probe],
                prefix: str) -> list[Site]:
    """A site of form goto for each asm goto record whose patch point holds the NOP sdt.h's asm puts there;
    a REF site (which gen refuses, saying why) for any other."""
    from sdtgen.tracepoints import stub_symbol

    out = []
    codes: dict[int, memoryview] = {}
    for tp in records:
        (shndx, offset), (tshndx, toffset) = tp.patch, tp.target
        sec, tsec = elf.section_at(shndx), elf.section_at(tshndx)
        code = codes.get(shndx)
        if code is None:
            code = codes[shndx] = elf.contents(sec)
        stub = stub_symbol(tp.probe)
        probe = probes.get(stub) or probes.setdefault(stub, probe_from_symbol(stub, prefix))
        nop = arch.goto_nop
        here = bytes(code[offset:offset + len(nop)])
        form, detail = GOTO, "asm goto NOP"
        if tp.probe_defined:
            form, detail = REF, (f"asm goto whose probe {printable(tp.probe)} the object defines itself (FreeBSD's "
                                 "own sys/sdt.h, whose out-of-line code calls its sdt_probe)")
        elif here != nop:
            form, detail = REF, (f"asm goto patch point holding {here.hex(' ') or 'nothing'}, not the one "
                                 f"{len(nop)}-byte NOP ({nop.hex(' ')}) a jump can replace whole")
        out.append(Site(probe.spec, stub, sec.name, offset, offset if sec.name == ".text" else None,
                        arch.reloc_name(tp.reloc), form, len(nop), detail, funcs.name(offset, shndx), tsec.name,
                        toffset, toffset if tsec.name == ".text" else None))
    return out


NAME_FIX = ("fire a defined probe only through sdt.h's SDT_PROBE macros, or rename one of the two: a stub "
            "called without SDT_PROBE_DEFINE lists as provider:::name, split at its first '_'")


def _check_one_name_each(elf: ElfFile, probes: dict[str, Probe], sites: list[Site],
                         defined_at: dict[str, int]) -> None:
    """Refuse two stub symbols that list under one probe name (``SDT_PROBE_DEFINE1(hk, , , hello, ...)`` and a
    direct call to ``__dtrace_sdt_hk_hello``): a trace names firings by probe, so theirs would be merged."""
    first_site: dict[str, str] = {}
    for s in sites:
        owner = probe_symbol(s.symbol)
        if owner not in first_site:  # a site's place is formatted only for the first of its probe's sites
            first_site[owner] = s.where

    def where(p: Probe) -> str:
        return place(DESC_SECTION, None, defined_at[p.symbol]) if p.described else first_site[p.symbol]

    by_spec: dict[str, Probe] = {}
    for p in probes.values():
        other = by_spec.setdefault(p.spec, p)
        if other is not p:
            # The place given first is a direct call's, when one of them is: that is what to change.
            there, here = sorted((other, p), key=lambda q: (not q.described, where(q)))
            raise elf.fail(f"stub symbols {printable(here.symbol)} and {printable(there.symbol)} (at {where(there)}) "
                           f"both list as probe {printable(p.spec)}, so their firings could not be told apart",
                           NAME_FIX, where=where(here))
    by_key: dict[int, Probe] = {}
    for p in sorted(probes.values(), key=where):
        other = by_key.setdefault(probe_key(p.symbol), p)
        if other is not p:  # 32-bit FNV-1a: one pair in about 77,000 probes shares an event id
            raise elf.fail(f"probes {printable(other.spec)} (at {where(other)}) and {printable(p.spec)} have one "
                           f"event id, {probe_key(p.symbol):#010x} (FNV-1a of their stub symbols), so their events "
                           "could not be told apart", "rename one of them", where=where(p))


def read_descriptors(elf: ElfFile) -> tuple[dict[str, Probe], dict[str, int]]:
    """The probes ``.sdt_desc`` defines, by stub symbol, and where in it each one's record is."""
    sec = elf.section(DESC_SECTION)
    if sec is None:
        return {}, {}
    try:
        return parse_descriptors(bytes(elf.contents(sec)))
    except DescriptorConflict as e:
        raise elf.fail(str(e), e.fix, where=place(DESC_SECTION, None, e.where)) from None
    except DescriptorError as e:
        raise elf.fail(f"bad probe descriptors in {DESC_SECTION}: {e}",
                       "define probes with the SDT_PROBE_DEFINE macros of sdtgen's sdt.h") from None


def section_place(index: SymbolIndex, section: Section, offset: int) -> str:
    """``section:function+0xoff`` of an offset in a relocatable object's section (``section+0xoff``
    outside every function)."""
    found = index.containing(offset, section.index)
    return place(section.name, printable(found[0]), found[1]) if found else place(section.name, None, offset)
