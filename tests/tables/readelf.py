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
