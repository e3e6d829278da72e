"""A small, validating ELF reader for objects and images.

Everything is checked against the file's size before it is used, so a
truncated or hostile file gives one ``SdtError`` rather than a traceback, a
hang or an allocation out of proportion to the file. Relocations and symbols
are decoded with ``struct.iter_unpack`` over the mapped file: kernel objects
carry hundreds of thousands of relocations and only a few matter.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import stat
from operator import itemgetter

from sdtgen.elf.structs import Layout, layout
from sdtgen.errors import SdtError
from sdtgen.plaindata import cached, record

ET_REL, ET_EXEC, ET_DYN = 1, 2, 3
SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA = 0, 1, 2, 3, 4
SHT_NOBITS, SHT_REL, SHT_DYNSYM, SHT_SYMTAB_SHNDX = 8, 9, 11, 18
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_COMPRESSED = 0x1, 0x2, 0x4, 0x800
ELFCOMPRESS_ZLIB = 1
SHN_UNDEF, SHN_LORESERVE, SHN_ABS, SHN_COMMON, SHN_XINDEX = 0, 0xFF00, 0xFFF1, 0xFFF2, 0xFFFF
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE, STT_GNU_IFUNC = 0, 1, 2, 3, 4, 10
STV_DEFAULT, STV_HIDDEN = 0, 2
PT_LOAD = 1
PF_X = 1

# The longest symbol or section name read, in bytes. Names are read where sdtgen needs them and
# refused past this with one line: a name table of 10 MB names shared by many symbols must
# not cost a copy per symbol (Linux's own KSYM_NAME_LEN is 512).
MAX_NAME = 4096

TYPE_NAMES = {ET_REL: "relocatable object", ET_EXEC: "executable", ET_DYN: "shared object or PIE"}


@record
class Section:
    # A kernel object built with -ffunction-sections has 80,000 of them: no instance dicts.
    __slots__ = ("addr", "align", "entsize", "flags", "index", "info", "link", "name", "offset", "size", "type")
    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int

    @property
    def is_exec(self) -> bool:
        return bool(self.flags & SHF_EXECINSTR)

    @property
    def is_alloc(self) -> bool:
        return bool(self.flags & SHF_ALLOC)


@record(frozen=True)
class Symbol:
    index: int
    name: str
    value: int
    size: int
    bind: int
    type: int
    visibility: int
    shndx: int
    # shndx is a reserved value (ABS, COMMON...), not a section: past 65,280 sections a real index
    # read from .symtab_shndx can equal one (0xfff1 is SHN_ABS and section 65,521 alike).
    special: bool = False

    @property
    def defined(self) -> bool:
        return self.shndx != SHN_UNDEF


@record(frozen=True)
class Segment:
    type: int
    flags: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int


class Reloc(tuple):
    """(offset, sym, type, addend): a tuple, as a kernel object makes tens of thousands."""

    __slots__ = ()

    def __new__(cls, offset: int, sym: int, type: int, addend: int) -> Reloc:
        return tuple.__new__(cls, (offset, sym, type, addend))

    offset = property(itemgetter(0))
    sym = property(itemgetter(1))
    type = property(itemgetter(2))
    addend = property(itemgetter(3))


def _read_all(fd: int, path: str) -> mmap.mmap | bytearray:
    """The whole file, read once into memory.

    Not the file mapped: a file cut short while it is mapped kills the process with SIGBUS at the
    next access, and a Python SIGBUS handler cannot help (measured: the faulting access repeats
    forever). A read takes what was there; a file truncated under it reads short and is
    reported like any truncated file. Read into anonymous memory (mmap of no file), which the
    kernel gives zeroed as it is touched: a bytearray would be zeroed first, byte by byte, a
    pass over a 34 MiB binary for nothing.
    """
    size = os.fstat(fd).st_size
    try:
        buf = mmap.mmap(-1, size) if size else bytearray()
    except (MemoryError, OSError):
        raise SdtError(path, f"is {size} bytes, more than this machine can hold in memory",
                       "free memory, or check that this is the file you meant") from None
    view, got = memoryview(buf), 0
    while got < size:
        n = os.preadv(fd, [view[got:]], got)
        if n <= 0:
            break
        got += n
    view.release()
    return buf if got == size else bytearray(buf[:got])


class ElfFile:
    """One ELF file, read into memory. Use as a context manager or call close()."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        try:
            # Non-blocking, so a FIFO is refused below rather than waited on.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            self._file = os.fdopen(fd, "rb")  # kept open for pread(); closed by close()
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                self._file.close()
                raise SdtError(self.path, "is not a regular file", "give an object file (.o) or a linked image")
            self._map = _read_all(fd, self.path)
        except OSError as e:
            raise SdtError(self.path, f"cannot read: {e.strerror}", "check the path") from None
        self.data = memoryview(self._map)
        self._names: dict[tuple[int, int], str] = {}  # (table, offset) -> name: symbols share names
        self._inflated: dict[int, memoryview] = {}  # compressed sections, decompressed once
        try:
            self._parse_header()
            self.sections = self._parse_sections()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._file.close()
        with contextlib.suppress(BufferError):  # a slice is still alive (say, in an exception's frame)
            self.data.release()

    def __enter__(self) -> ElfFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- errors ---------------------------------------------------------------
    def fail(self, what: str, fix: str = "", where: str = "") -> SdtError:
        return SdtError(self.path, what, fix, where=where)

    def _bad(self, what: str) -> SdtError:
        return self.fail(f"corrupt ELF file: {what}", "rebuild it; the file is damaged or not produced by a linker")

    def _check_range(self, offset: int, size: int, what: str) -> None:
        if offset < 0 or size < 0 or offset + size > len(self.data):
            raise self._bad(f"{what} (offset {offset:#x}, size {size:#x}) lies outside the {len(self.data)}-byte file")

    # -- header -----------------------------------------------------------------
    def _parse_header(self) -> None:
        d = self.data
        if len(d) < 4 or bytes(d[:4]) != b"\x7fELF":
            raise self.fail("not an ELF file", "give an object file (.o) or a linked image")
        if len(d) < 16:
            raise self._bad("the ELF identification is truncated")
        ei_class, ei_data = d[4], d[5]
        if ei_class not in (1, 2):
            raise self.fail(f"unknown ELF class {ei_class}", "only 32- and 64-bit ELF files are supported")
        if ei_data not in (1, 2):
            raise self.fail(f"unknown ELF data encoding {ei_data}", "only little- and big-endian ELF files exist")
        self.is64 = ei_class == 2
        self.little = ei_data == 1
        self.bits = 64 if self.is64 else 32
        self.layout: Layout = layout(self.is64, self.little)
        self.endian = self.layout.endian
        hdr = self.layout.ehdr
        if len(d) < 16 + hdr.size:
            raise self._bad("the ELF header is truncated")
        (self.type, self.machine, _ver, self.entry, self.phoff, self.shoff, self.flags, _ehsize,
         self.phentsize, self.phnum, self.shentsize, shnum, shstrndx) = hdr.unpack_from(d, 16)
        self._shnum_raw, self._shstrndx_raw = shnum, shstrndx

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.type, f"ELF type {self.type}")

    # -- sections -----------------------------------------------------------------
    def _parse_sections(self) -> list[Section]:
        if self.shoff == 0:
            return []
        sh = self.layout.shdr
        if self.shentsize != sh.size:
            raise self._bad(f"section header size {self.shentsize}, expected {sh.size}")
        self._check_range(self.shoff, sh.size, "the section header table")
        shnum, shstrndx = self._shnum_raw, self._shstrndx_raw
        first = sh.unpack_from(self.data, self.shoff)
        if shnum == 0:  # extended numbering: the real count lives in section 0
            shnum = first[5]
        if shstrndx == SHN_XINDEX:
            shstrndx = first[6]
        self._check_range(self.shoff, shnum * sh.size, f"the section header table of {shnum} entries")
        if shstrndx >= shnum:
            raise self._bad(f"section name table index {shstrndx} is out of range")
        raw = sh.iter_unpack(self.data[self.shoff:self.shoff + shnum * sh.size])
        names = b""
        if shstrndx:
            _, _, _, _, str_off, str_size, *_ = sh.unpack_from(self.data, self.shoff + shstrndx * sh.size)
            self._check_range(str_off, str_size, "the section name table")
            names = bytes(self.data[str_off:str_off + str_size])
        filesize = len(self.data)
        sections = []
        for i, (name, typ, flags, addr, off, size, link, info, align, ent) in enumerate(raw):
            # The loop over every section of a kernel object: checks inline, names sliced from one blob.
            if typ != SHT_NOBITS and typ != SHT_NULL and (off + size > filesize):
                self._check_range(off, size, f"section {i}")
            if link >= shnum and i:
                raise self._bad(f"section {i} links to section {link}, but there are only {shnum}")
            end = names.find(b"\0", name, name + MAX_NAME + 1)
            if end < 0 and name < len(names) and names.find(b"\0", name) >= 0:
                raise self._too_long(f"the name of section {i}")
            if name >= len(names) or end < 0:
                if not names and name == 0:
                    end = 0
                else:
                    raise self._bad(f"the name of section {i} lies outside the section name table")
            nm = names[name:end].decode("utf-8", "backslashreplace")
            sections.append(Section(i, nm, typ, flags, addr, off, size, link, info, align, ent))
        return sections

    def _too_long(self, what: str) -> SdtError:
        return self.fail(f"{what} is longer than {MAX_NAME} bytes, which sdtgen refuses",
                         "rename it; a name this long is a damaged or hostile file")

    def _cstr(self, base: int, size: int, off: int, what: str) -> str:
        """A name from a string table: bounded by MAX_NAME, and decoded once per offset."""
        if off >= size:
            if off == 0 and size == 0:
                return ""
            raise self._bad(f"{what} at string offset {off:#x} is outside its {size}-byte string table")
        key = (base, off)
        cached = self._names.get(key)
        if cached is not None:
            return cached
        start = base + off
        end = self._map.find(b"\0", start, min(base + size, start + MAX_NAME + 1))
        if end < 0:
            if start + MAX_NAME < base + size:
                raise self._too_long(what)
            raise self._bad(f"{what} at string offset {off:#x} is not terminated")
        name = bytes(self.data[start:end]).decode("utf-8", "backslashreplace")
        self._names[key] = name
        return name

    def section(self, name: str) -> Section | None:
        """The first section of that name (a scan: no index of 80,000 names is kept for a few lookups)."""
        return next((s for s in self.sections if s.name == name), None)

    def section_at(self, index: int) -> Section:
        if not 0 <= index < len(self.sections):
            raise self._bad(f"reference to section {index}, but there are only {len(self.sections)}")
        return self.sections[index]

    def contents(self, sec: Section) -> memoryview:
        """A section's bytes; an SHF_COMPRESSED one decompressed (zlib, as the gABI defines it)."""
        if sec.type == SHT_NOBITS:
            return memoryview(b"")
        if sec.flags & SHF_COMPRESSED:
            return self._decompressed(sec)
        return self.data[sec.offset:sec.offset + sec.size]

    def _decompressed(self, sec: Section) -> memoryview:
        cached = self._inflated.get(sec.index)
        if cached is not None:
            return cached
        what = f"section {sec.name} is compressed (SHF_COMPRESSED)"
        if sec.is_alloc:  # the gABI forbids it: a loader maps the bytes as they are
            raise self._bad(f"{what} but loaded (SHF_ALLOC), which no loader can use")
        chdr = self.layout.chdr
        if sec.size < chdr.size:
            raise self._bad(f"{what} but shorter than its compression header")
        ctype, *_, size, _align = chdr.unpack_from(self.data, sec.offset)
        if ctype != ELFCOMPRESS_ZLIB:
            raise self.fail(f"{what} with compression type {ctype}, which sdtgen does not read (zlib only)",
                            "rebuild it with the section uncompressed")
        import zlib

        inflate = zlib.decompressobj()
        try:  # never more than the header promises, and the header is bounded by what a file can hold
            out = inflate.decompress(self.data[sec.offset + chdr.size:sec.offset + sec.size], min(size, 1 << 32) + 1)
        except zlib.error as e:
            raise self._bad(f"{what} but its zlib data is damaged ({e})") from None
        if len(out) != size:
            raise self._bad(f"{what} to {size} bytes, but its data inflates to {len(out)}")
        self._inflated[sec.index] = view = memoryview(out)
        return view

    # -- symbols -----------------------------------------------------------------
    @cached
    def symtab(self) -> Section | None:
        for s in self.sections:
            if s.type == SHT_SYMTAB:
                return s
        return None

    def symbol_values(self, prefix: str) -> dict[str, int]:
        """Values of the defined symbols whose names start with ``prefix`` (fast: no full symbol decode); an
        undefined one has no value (a kernel linked with undefined symbols allowed keeps them)."""
        rows = ((name, self._symbol_row(i)) for i, name in self.symbol_indices_with_prefix(prefix).items())
        return {name: row[4] for name, row in rows if row[3] != 0}

    @cached
    def _symtab_info(self) -> tuple[object, memoryview, Section | None, list[int] | None]:
        """How to read .symtab, checked once; rows are then decoded as they are needed, never all kept."""
        st = self.symtab
        fmt = self.layout.sym
        if st is None:
            return fmt, memoryview(b""), None, None
        view = self._table_view(st)
        strsec = self.section_at(st.link)
        xindex = None
        for s in self.sections:
            if s.type == SHT_SYMTAB_SHNDX and s.link == st.index:
                self._check_range(s.offset, s.size, f"section {s.name}")
                xindex = [v for (v,) in self.layout.u32.iter_unpack(self.data[s.offset:s.offset + s.size // 4 * 4])]
        nsec = len(self.sections)
        if nsec < SHN_LORESERVE and any(nsec <= x < SHN_LORESERVE for x in set(self._shndx_column(view))):
            i, x = next((i, x) for i, x in enumerate(self._shndx_column(view)) if nsec <= x < SHN_LORESERVE)
            raise self._bad(f"symbol {i} refers to section {x}, but there are only {nsec}")
        return fmt, view, strsec, xindex

    def _shndx_column(self, view: memoryview):
        """Every symbol's st_shndx: in the file's own byte order a strided view of 16-bit words (walked
        in C), else from the unpacked rows."""
        import sys

        size = self.layout.sym.size
        if self.little == (sys.byteorder == "little") and len(view) % size == 0:
            return view.cast("B").cast("H")[(3 if self.is64 else 7)::size // 2]
        return (row[3] for row in self.layout.sym_rows(view))

    def _real_shndx(self, i: int, shndx: int, xindex: list[int] | None) -> int:
        """A symbol's section index, looked up in .symtab_shndx when it is SHN_XINDEX (and checked)."""
        if shndx != SHN_XINDEX:
            return shndx  # a real index (checked in _symtab_info) or ABS, COMMON...
        if xindex is None or i >= len(xindex):
            raise self._bad(f"symbol {i} needs an extended section index that is missing")
        if xindex[i] >= len(self.sections):
            raise self._bad(f"symbol {i} refers to section {xindex[i]}, but there are only {len(self.sections)}")
        return xindex[i]

    def _symbol_rows(self):
        return self.layout.sym_rows(self._symtab_info[1])

    def _symbol_row(self, index: int) -> tuple[int, ...]:
        fmt, view, _, _ = self._symtab_info
        return self.layout.sym_row(fmt.unpack_from(view, index * fmt.size))

    @cached
    def symbols(self) -> list[Symbol]:
        """Every symbol of .symtab, in table order (index 0 is the null symbol)."""
        _, _, strsec, xindex = self._symtab_info
        if strsec is None:
            return []
        out = []
        for i, (name, info, other, shndx, value, size) in enumerate(self._symbol_rows()):
            special = shndx >= SHN_LORESERVE and shndx != SHN_XINDEX
            shndx = self._real_shndx(i, shndx, xindex)
            nm = self._cstr(strsec.offset, strsec.size, name, f"the name of symbol {i}") if name else ""
            out.append(Symbol(i, nm, value, size, info >> 4, info & 0xF, other & 3, shndx, special))
        return out

    def symbol_indices_with_prefix(self, prefix: str) -> dict[int, str]:
        """Indices and names of symbols whose name starts with ``prefix``.

        Fast path for big objects: find the prefix in the string table first,
        then decode only the symbols that point at one of those strings.
        """
        st = self.symtab
        if st is None:
            return {}
        strsec = self.section_at(st.link)
        # Searched in place (no copy of a string table that can be tens of megabytes).
        data, base, top = self._map, strsec.offset, strsec.offset + strsec.size
        if strsec.type == SHT_NOBITS:
            base = top = 0
        size = top - base
        pre = prefix.encode()
        # Every place the prefix starts, not only after a NUL: a linker shares string tails, so
        # __dtrace_sdt_x may be the end of __sdt_rec___dtrace_sdt_x.
        starts = set()
        pos = data.find(pre, base, top)
        while pos >= 0:
            starts.add(pos - base)
            pos = data.find(pre, pos + 1, top)
        if not starts:
            return {}
        found = {}
        names: dict[int, str] = {}  # one string per name, however many symbols share it
        for i, row in enumerate(self._symbol_rows()):
            if row[0] >= size:
                raise self._bad(f"the name of symbol {i} lies outside its {size}-byte string table")
            if row[0] in starts and i:
                name = names.get(row[0])
                if name is None:
                    start = base + row[0]
                    end = data.find(b"\0", start, min(top, start + MAX_NAME + 1))
                    if end < 0:
                        if data.find(b"\0", start, top) >= 0:
                            raise self._too_long(f"the name of symbol {i}")
                        raise self._bad(f"the name of symbol {i} is not terminated")
                    name = names[row[0]] = data[start:end].decode("utf-8", "backslashreplace")
                found[i] = name
        return found

    # -- relocations -------------------------------------------------------------
    def reloc_sections(self) -> list[tuple[Section, Section]]:
        """Pairs of (relocation section, the section it applies to). A linked file's dynamic relocations
        (.rela.dyn) apply to no one section: theirs is the null section 0."""
        out = []
        for s in self.sections:
            if s.type in (SHT_REL, SHT_RELA):
                if s.info >= len(self.sections) or (s.info == 0 and self.type == ET_REL):
                    raise self._bad(f"relocation section {s.name} applies to section {s.info}, which does not exist")
                out.append((s, self.sections[s.info]))
        return out

    def relocations(self, rsec: Section, only_syms: set[int] | dict[int, str] | None = None) -> list[Reloc]:
        """Decode one relocation section, optionally keeping only some symbols."""
        rela = rsec.type == SHT_RELA
        st = self.layout.reloc(rela)
        if rsec.entsize != st.size or rsec.size % st.size:
            raise self._bad(f"relocation section {rsec.name} has entry size {rsec.entsize}, expected {st.size}")
        shift, mask = self.layout.r_shift, self.layout.r_mask
        self._check_range(rsec.offset, rsec.size, f"relocation section {rsec.name}")
        blob = bytes(self.data[rsec.offset:rsec.offset + rsec.size])  # searched as bytes, read once
        if only_syms is not None and len(only_syms) <= 8:
            return self._relocations_against(blob, st, rela, only_syms)
        rows = st.iter_unpack(blob)
        if only_syms is not None:
            return [Reloc(t[0], t[1] >> shift, t[1] & mask, t[2] if rela else 0)
                    for t in rows if t[1] >> shift in only_syms]
        return [Reloc(t[0], t[1] >> shift, t[1] & mask, t[2] if rela else 0) for t in rows]

    def largest_symbol(self, rsec: Section) -> int:
        """The largest symbol index a relocation of ``rsec`` names (-1: none): what tells an index past the symbol
        table. Read as the words of r_info that hold it, not row by row (a kernel object has 70,000 rows)."""
        import sys

        st = self.layout.reloc(rsec.type == SHT_RELA)
        if rsec.entsize != st.size or rsec.size % st.size:
            raise self._bad(f"relocation section {rsec.name} has entry size {rsec.entsize}, expected {st.size}")
        self._check_range(rsec.offset, rsec.size, f"relocation section {rsec.name}")
        if not rsec.size:
            return -1
        blob = bytes(self.data[rsec.offset:rsec.offset + rsec.size])
        if self.little != (sys.byteorder == "little"):
            return max(t[1] >> self.layout.r_shift for t in st.iter_unpack(blob))
        word = self.layout.r_sym_at // 4  # the 32-bit word of a row holding r_sym (ELF32: its top 24 bits)
        return max(memoryview(blob).cast("I")[word::st.size // 4]) >> (32 - 8 * self.layout.r_sym_width)

    def _relocations_against(self, blob: bytes, st, rela: bool, syms) -> list[Reloc]:
        """The rows of a few symbols, found by searching for their index bytes in r_info: a kernel
        object's 70,000 relocations are never decoded one by one in Python for 7,000 matches."""
        at, width = self.layout.r_sym_at, self.layout.r_sym_width  # r_info's symbol bytes in a row
        order = "little" if self.little else "big"
        shift, mask = self.layout.r_shift, self.layout.r_mask
        size, out = st.size, []  # (where in the section, relocation)
        for sym in syms:
            if not 0 <= sym < 1 << (8 * width):
                continue
            needle, pos = sym.to_bytes(width, order), blob.find(sym.to_bytes(width, order), at)
            while pos >= 0:
                if (pos - at) % size == 0:
                    t = st.unpack_from(blob, pos - at)
                    out.append((pos, Reloc(t[0], t[1] >> shift, t[1] & mask, t[2] if rela else 0)))
                    pos = blob.find(needle, pos + size)
                else:
                    pos = blob.find(needle, pos + 1)
        if len(syms) > 1:
            out.sort(key=lambda found: found[0])  # file order, as the full decode gives them
        return [r for _, r in out]

    # -- segments and addresses ---------------------------------------------------
    @cached
    def segments(self) -> list[Segment]:
        if self.phoff == 0 or self.phnum == 0:
            return []
        ph = self.layout.phdr
        if self.phentsize != ph.size:
            raise self._bad(f"program header size {self.phentsize}, expected {ph.size}")
        self._check_range(self.phoff, self.phnum * ph.size, "the program header table")
        out = []
        for t in ph.iter_unpack(self.data[self.phoff:self.phoff + self.phnum * ph.size]):
            if self.is64:
                typ, flags, off, vaddr, paddr, filesz, memsz, _align = t
            else:
                typ, off, vaddr, paddr, filesz, memsz, flags, _align = t
            if typ == PT_LOAD:
                self._check_range(off, filesz, "a loadable segment")
                if filesz > memsz:
                    raise self._bad("a loadable segment has more file bytes than memory bytes")
            out.append(Segment(typ, flags, off, vaddr, paddr, filesz, memsz))
        return out

    @cached
    def _by_addr(self) -> tuple[list[int], list[Section], list[int]]:
        """Loaded sections with contents sorted by address, and the highest end up to each one."""
        secs = sorted((s for s in self.sections if s.is_alloc and s.type != SHT_NOBITS and s.size),
                      key=lambda s: s.addr)
        ends, top = [], 0
        for s in secs:
            top = max(top, s.addr + s.size)
            ends.append(top)
        return [s.addr for s in secs], secs, ends

    def read_addr(self, addr: int, size: int) -> bytes:
        """Bytes at a link-time address of a linked image (from its sections, by one index of addresses)."""
        starts, secs, ends = self._by_addr
        i = bisect.bisect_right(starts, addr) - 1
        # Sections of a linked image do not overlap; a hostile one may, so look further back only
        # while an earlier section still reaches far enough.
        while i >= 0 and ends[i] >= addr + size:
            s = secs[i]
            if addr + size <= s.addr + s.size:
                off = s.offset + addr - s.addr
                return bytes(self.data[off:off + size])
            i -= 1
        raise self.fail(f"address {addr:#x} (+{size}) is not inside any section with contents")

    def symbol_map(self) -> dict[str, Symbol]:
        """Defined symbols by name; globals win over locals of the same name."""
        out: dict[str, Symbol] = {}
        for s in self.symbols:
            keep = s.name and s.defined and s.type != STT_SECTION
            if keep and (s.name not in out or s.bind != STB_LOCAL):
                out[s.name] = s
        return out

    @cached
    def dynsym(self) -> Section | None:
        return next((s for s in self.sections if s.type == SHT_DYNSYM), None)

    def typed_symbols(self, types: tuple[int, ...], sections: set[int] | None = None) -> list[tuple[int, ...]]:
        """(value, value + size, name offset, section index) of the symbols of some types (STT_*) defined
        in a section (in ``sections`` when given), from .symtab, or from .dynsym when the file was
        stripped. ``symbol_name`` reads a name: naming 500 sites must not decode 200,000 names.
        """
        if self.symtab is not None:
            _, view, strsec, xindex = self._symtab_info
        elif self.dynsym is not None:
            view, strsec, xindex = self._table_view(self.dynsym), self.section_at(self.dynsym.link), None
        else:
            return []
        self._names_in = strsec
        if strsec is None:
            return []
        nsec, rows = len(self.sections), self.layout.sym_rows(view)
        if xindex is None:  # a comprehension over every symbol: the loop of a 100,000-symbol library
            if sections is None:
                return [(v, v + z, n, x) for n, i, _, x, v, z in rows if i & 0xF in types and 0 < x < nsec]
            return [(v, v + z, n, x) for n, i, _, x, v, z in rows if i & 0xF in types and x in sections]
        out = []
        for k, (name, info, _other, shndx, value, size) in enumerate(rows):
            if info & 0xF not in types or shndx == SHN_UNDEF or SHN_LORESERVE <= shndx != SHN_XINDEX:
                continue  # undefined, or ABS, COMMON...: in no section
            shndx = self._real_shndx(k, shndx, xindex)
            if shndx < nsec and (sections is None or shndx in sections):
                out.append((value, value + size, name, shndx))
        return out

    _names_in: Section | None = None

    def symbol_name(self, offset: int) -> str:
        """The name at ``offset`` of the string table ``typed_symbols`` read names from."""
        strsec = self._names_in
        return self._cstr(strsec.offset, strsec.size, offset, "a symbol's name") if strsec and offset else ""

    def _table_view(self, sec: Section) -> memoryview:
        fmt = self.layout.sym
        if sec.entsize != fmt.size or sec.size % fmt.size:
            raise self._bad(f"symbol table {sec.name} has entry size {sec.entsize}, expected {fmt.size}")
        return self.contents(sec)

    def symbol(self, index: int) -> Symbol:
        """One symbol of .symtab, decoded alone."""
        _, _, strsec, xindex = self._symtab_info
        name, info, other, shndx, value, size = self._symbol_row(index)
        nm = self._cstr(strsec.offset, strsec.size, name, f"the name of symbol {index}") if name and strsec else ""
        return Symbol(index, nm, value, size, info >> 4, info & 0xF, other & 3, self._real_shndx(index, shndx, xindex),
                      SHN_LORESERVE <= shndx != SHN_XINDEX)

    def symbol_defined(self, index: int) -> bool:
        return self._symbol_row(index)[3] != SHN_UNDEF

