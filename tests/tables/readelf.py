"""What readelf and objdump say about a file: the independent truth the table readers are held to."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from helpers import run


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: str
    addr: int
    offset: int
    size: int
    info: int


@dataclass(frozen=True)
class Sym:
    value: int
    size: int
    type: str
    ndx: str
    name: str


@dataclass
class Note:
    provider: str
    name: str
    location: int
    base: int
    semaphore: int
    args: str


@dataclass
class RelocSection:
    name: str
    target: int  # index of the section it applies to
    rows: list[tuple[int, int, str, int | None]] = field(default_factory=list)  # offset, symbol index, type, addend


def sections(path: Path) -> list[Section]:
    out = []
    for line in run(["readelf", "-SW", str(path)]).stdout.splitlines():
        m = re.match(r"\s*\[\s*(\d+)\]\s+(\S+)\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+"
                     r"\s+(\S*)\s+(\d+)\s+(\d+)\s+\d+$", line)
        if m:
            out.append(Section(int(m[1]), m[2], m[3], int(m[4], 16), int(m[5], 16), int(m[6], 16), int(m[9])))
    return out


def section(path: Path, name: str) -> Section:
    return next(s for s in sections(path) if s.name == name)


def symbols(path: Path) -> dict[int, Sym]:
    """.symtab by index (readelf -s)."""
    out, table = {}, None
    for line in run(["readelf", "-sW", str(path)]).stdout.splitlines():
        if line.startswith("Symbol table"):
            table = ".symtab" if "'.symtab'" in line else "other"
            continue
        m = re.match(r"\s*(\d+):\s+([0-9a-f]+)\s+(\S+)\s+(\S+)\s+\S+\s+\S+\s+(\S+)\s?(.*)$", line)
        if m and table == ".symtab":
            size = int(m[3], 16) if m[3].startswith("0x") else int(m[3])
            out[int(m[1])] = Sym(int(m[2], 16), size, m[4], m[5], m[6].split("@")[0] if "@" in m[6] else m[6])
    return out


def functions(path: Path) -> list[Sym]:
    return [s for s in symbols(path).values() if s.type in ("FUNC", "IFUNC") and s.ndx != "UND"]


def function_at(path: Path, addr: int, ndx: str | None = None) -> str:
    """The function holding an address (in section ``ndx`` of a relocatable object)."""
    for s in functions(path):
        if (ndx is None or s.ndx == ndx) and s.value <= addr < s.value + max(s.size, 1):
            return s.name
    return ""


def notes(path: Path) -> list[Note]:
    """The stapsdt notes, in file order (readelf -n applies a relocatable object's relocations)."""
    out = []
    for line in run(["readelf", "-n", str(path)]).stdout.splitlines():
        line = line.strip()
        if line.startswith("Provider:"):
            out.append(Note(line.split(":", 1)[1].strip(), "", 0, 0, 0, ""))
        elif line.startswith("Name:") and out:
            out[-1].name = line.split(":", 1)[1].strip()
        elif line.startswith("Location:") and out:
            vals = dict(re.findall(r"(\w+): (0x[0-9a-f]+)", line))
            out[-1].location, out[-1].base = int(vals["Location"], 16), int(vals["Base"], 16)
            out[-1].semaphore = int(vals["Semaphore"], 16)
        elif line.startswith("Arguments:") and out:
            out[-1].args = line.split(":", 1)[1].strip()
    return out


def relocations(path: Path) -> list[RelocSection]:
    """Every relocation section (readelf -r), matched to the section it applies to by file offset."""
    by_offset = {}
    for line in run(["readelf", "-SW", str(path)]).stdout.splitlines():
        m = re.match(r"\s*\[\s*(\d+)\]\s+(\S+)\s+(RELA?)\s+[0-9a-f]+\s+([0-9a-f]+)\s+.*\s(\d+)\s+\d+$", line)
        if m:
            by_offset[int(m[4], 16)] = int(m[5])
    out: list[RelocSection] = []
    is64 = "ELF64" in run(["readelf", "-h", str(path)]).stdout
    for line in run(["readelf", "-rW", str(path)]).stdout.splitlines():
        m = re.match(r"Relocation section '(\S+)' at offset (0x[0-9a-f]+)", line)
        if m:
            out.append(RelocSection(m[1], by_offset[int(m[2], 16)]))
            continue
        f = line.split()
        if out and len(f) >= 3 and re.fullmatch(r"[0-9a-f]{8,16}", f[0]) and f[2].startswith("R_"):
            info = int(f[1], 16)
            addend = None
            m = re.search(r"([+-]) ([0-9a-f]+)$", line)
            if m and out[-1].name.startswith(".rela"):
                addend = int(m[2], 16) * (-1 if m[1] == "-" else 1)
            out[-1].rows.append((int(f[0], 16), info >> 32 if is64 else info >> 8, f[2], addend))
    return out


def contents(path: Path, name: str) -> list[tuple[int, bytes]]:
    """(start address, bytes) of every section of that name, as objdump -s dumps them."""
    out: list[tuple[int, bytearray]] = []
    for line in run(["objdump", "-s", "-j", name, str(path)]).stdout.splitlines():
        if line.startswith("Contents of section"):
            out.append((-1, bytearray()))
            continue
        m = re.match(r" ([0-9a-f]+) ((?:[0-9a-f]{2,8} ){1,4})", line + " ")
        if m and out:
            start, data = out[-1]
            if start < 0:
                out[-1] = (int(m[1], 16), data)
            data += bytes.fromhex(m[2].replace(" ", ""))
    return [(a, bytes(d)) for a, d in out]


def relocated_fields(path: Path, name: str) -> dict[tuple[int, int], list[tuple[str, str]]]:
    """Per (section index, offset) of every section called ``name`` in a relocatable object, the
    relocation types there and where each points: "section+0xoff", or "symbol+0xoff" for a symbol
    the object does not define. REL objects keep the addend in the bytes, read from objdump -s."""
    secs = sections(path)
    names = {str(s.index): s.name for s in secs}
    syms = symbols(path)
    dumps = {}
    wanted = [s.index for s in secs if s.name == name]
    for index, (_, data) in zip(wanted, contents(path, name), strict=True):
        dumps[index] = data
    out: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for rs in relocations(path):
        if rs.target not in dumps:
            continue
        for offset, sym, typ, addend in rs.rows:
            if addend is None:
                addend = int.from_bytes(dumps[rs.target][offset:offset + 4], "little", signed=True)
            s = syms[sym]
            where = f"{s.name}+{addend:#x}" if s.ndx == "UND" else f"{names[s.ndx]}+{s.value + addend:#x}"
            out.setdefault((rs.target, offset), []).append((typ, where))
    return out


def words(data: bytes, size: int, signed: bool = False) -> list[int]:
    return [int.from_bytes(data[i:i + size], "little", signed=signed) for i in range(0, len(data), size)]


def symbol_at(path: Path, where: str, types=("OBJECT",)) -> str:
    """The symbol of those types holding ``where`` ("section+0xoff" in an object, an address otherwise),
    with "+0xoff" when the place is inside it."""
    if isinstance(where, str) and "+" in where:
        sec, off = where.rsplit("+", 1)
        ndx = {s.name: str(s.index) for s in sections(path)}.get(sec)
        if ndx is None:
            return where.rsplit("+", 1)[0] if int(off, 16) == 0 else where  # an undefined symbol
        addr = int(off, 16)
    else:
        ndx, addr = None, where
    for s in symbols(path).values():
        if s.type in types and (ndx is None or s.ndx == ndx) and s.value <= addr < s.value + max(s.size, 1):
            return s.name if addr == s.value else f"{s.name}+{addr - s.value:#x}"
    return ""


def first_function_from(path: Path, where) -> str:
    """The function starting first at or after ``where`` (an address, or "section+0xoff")."""
    if isinstance(where, str):
        sec, off = where.rsplit("+", 1)
        ndx, addr = {s.name: str(s.index) for s in sections(path)}[sec], int(off, 16)
    else:
        ndx, addr = None, where
    starts = sorted((s.value, s.name) for s in functions(path) if (ndx is None or s.ndx == ndx) and s.value >= addr)
    return starts[0][1] if starts else ""


def linked_words(path: Path, start: int, data: bytes, size: int) -> list[int]:
    """The addresses an array of pointers in a linked file holds: its bytes, or where the linker left
    them zero for the loader (RISC-V's ld in a shared object), the addend of readelf -r's
    R_*_RELATIVE relocation at that address."""
    fixups = {}
    for line in run(["readelf", "-rW", str(path)]).stdout.splitlines():
        f = line.split()
        if len(f) >= 4 and f[2].endswith("_RELATIVE"):
            fixups[int(f[0], 16)] = int(f[-1], 16)
    return [w or fixups.get(start + i * size, 0) for i, w in enumerate(words(data, size))]
