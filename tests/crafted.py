"""Hostile inputs made from real compiler-made objects by small, explicit edits.

Each function compiles C with gcc (through helpers.compile_c) and, where the compiler cannot
say it, edits the ELF file with plain struct packing; readelf is the truth the tests compare to.
"""

from __future__ import annotations

import struct
from pathlib import Path

from helpers import compile_c

from sdtgen.elf.reader import ElfFile

PREFIX = "__dtrace_sdt_"


def descriptor_object(tmp: Path, name: str, symbol_asm: str) -> Path:
    """An object whose .sdt_desc record names ``symbol_asm`` (assembler directives for the field)."""
    record = "\\n".join([
        '.pushsection .sdt_desc, \\"\\"', '.asciz \\"SDT1\\"', symbol_asm, '.asciz \\"t\\"', '.asciz \\"m\\"',
        '.asciz \\"f\\"', '.asciz \\"n\\"', '.asciz \\"0\\"', ".popsection"])
    src = f'__asm__("{record}\\n");\nvoid {PREFIX}t_m_f_n(void);\nvoid f(void) {{ {PREFIX}t_m_f_n(); }}\n'
    return compile_c(tmp, name, src)


def calls_object(tmp: Path, name: str, count: int, stem: str = "p_m_f_n") -> Path:
    """An object with ``count`` functions, each calling its own undefined probe function."""
    lines = []
    for i in range(count):
        lines.append(f"void {PREFIX}{stem}{i}(void);")
        lines.append(f"void f{i}(void) {{ {PREFIX}{stem}{i}(); }}")
    return compile_c(tmp, name, "\n".join(lines) + "\n")


def _shdr_offset(elf: ElfFile, index: int) -> int:
    return elf.shoff + index * elf.shentsize


def share_one_long_name(obj: Path, out: Path, length: int) -> int:
    """Point every probe symbol's name at one new string of ``length`` bytes; how many now share it."""
    return point_probe_names(obj, out, (PREFIX + "x" * length).encode()[:length])


def point_probe_names(obj: Path, out: Path, name: bytes) -> int:
    """Point every probe symbol's name at one new string ``name`` (.strtab moved to the end of the file).

    Returns how many symbols now share it.
    """
    data = bytearray(obj.read_bytes())
    with ElfFile(obj) as elf:
        st = elf.symtab
        strsec = elf.section_at(st.link)
        old = bytes(elf.contents(strsec))
        probes = [s for s in elf.symbols if s.name.startswith(PREFIX)]
        strtab_hdr = _shdr_offset(elf, strsec.index)
    new_off = len(data)
    data += old + name + b"\0"
    struct.pack_into("<QQ", data, strtab_hdr + 0x18, new_off, len(old) + len(name) + 1)  # sh_offset, sh_size
    for s in probes:
        struct.pack_into("<I", data, st.offset + s.index * st.entsize, len(old))
    out.write_bytes(data)
    return len(probes)


def rename_in_place(obj: Path, out: Path, old: bytes, new: bytes) -> None:
    """Replace a string of the file with another of the same length (a symbol or a table string)."""
    assert len(old) == len(new)
    data = obj.read_bytes()
    assert data.count(old) == 1, f"{old!r} occurs {data.count(old)} times"
    out.write_bytes(data.replace(old, new))


def rename_in_section(path: Path, out: Path, section: str, old: bytes, new: bytes) -> None:
    """Replace the one NUL-terminated string ``old`` inside ``section`` with ``new`` of the same length."""
    assert len(old) == len(new)
    data = bytearray(path.read_bytes())
    with ElfFile(path) as elf:
        sec = elf.section(section)
    body = bytes(data[sec.offset:sec.offset + sec.size])
    at = body.find(b"\0" + old + b"\0")
    assert at >= 0 and body.count(b"\0" + old + b"\0") == 1
    data[sec.offset + at + 1:sec.offset + at + 1 + len(old)] = new
    out.write_bytes(data)
