"""The bounded program form the runtime verifies and runs (sdt_program.c), as bytes: encoding and decoding.

Every layout comes from sdtgen/layout.py (PROGRAM, INSN, AGG_DESC); the four architectures are
little-endian, so a program is the same bytes on each of them.
"""

from __future__ import annotations

import struct

from sdtgen.layout import AGG_DESC, CONSTANTS, INSN, PROGRAM, VALUES
from sdtgen.plaindata import record

OPS = {n[len("SDT_OP_"):]: v for n, v, _ in CONSTANTS if n.startswith("SDT_OP_") and n != "SDT_OP_IMM"}
OP_NAMES = {v: k for k, v in OPS.items()}
IMM = VALUES["SDT_OP_IMM"]
EXT = {n[len("SDT_EXT_"):]: v for n, v, _ in CONSTANTS if n.startswith("SDT_EXT_")}
FUNCS = {"count": VALUES["SDT_AGG_COUNT"], "sum": VALUES["SDT_AGG_SUM"], "min": VALUES["SDT_AGG_MIN"],
         "max": VALUES["SDT_AGG_MAX"], "avg": VALUES["SDT_AGG_AVG"], "quantize": VALUES["SDT_AGG_QUANTIZE"],
         "lquantize": VALUES["SDT_AGG_LQUANTIZE"]}
FUNC_NAMES = {v: k for k, v in FUNCS.items()}
BINARY_FIRST, BINARY_LAST = OPS["ADD"], OPS["UGE"]
TASK_FIELDS = {"id": VALUES["SDT_TASK_ID"], "context": VALUES["SDT_TASK_CONTEXT"]}

_HEADER = PROGRAM.struct(64)
NO_GUARD = (0, 0, 0, 0, (1 << 64) - 1)  # a span of every value: every firing passes
_INSN = INSN.struct(64)
_DESC = AGG_DESC.struct(64)


@record(frozen=True)
class Insn:
    op: int  # SDT_OP_*, with IMM for a binary operation whose right operand is imm
    dst: int = 0
    a: int = 0
    b: int = 0
    imm: int = 0  # signed 32-bit

    def __str__(self) -> str:
        name = OP_NAMES.get(self.op & ~IMM, f"op{self.op}")
        if self.op & IMM:
            return f"{name} r{self.dst}, r{self.a}, #{self.imm}"
        fields = {"EXIT": "", "REC": "", "RECNZ": f"r{self.a}", "CATCH": f"@{self.imm}", "JA": f"@{self.imm}",
                  "JZ": f"r{self.a}, @{self.imm}", "JNZ": f"r{self.a}, @{self.imm}", "LDI": f"r{self.dst}, #{self.imm}",
                  "LDC": f"r{self.dst}, c{self.imm}", "LDARG": f"r{self.dst}, arg{self.a}, ext{self.b}",
                  "LDCPU": f"r{self.dst}", "LDPROBE": f"r{self.dst}", "STRCMP": f"r{self.dst}, arg{self.a}, "
                  f"s{self.imm}", "PIN": f"r{self.dst}, c{self.imm & 0xffff}+{self.imm >> 16}",
                  "AGG": f"agg{self.b}, r{self.dst}.., r{self.a}",
                  "LDTASK": f"r{self.dst}, " + ("context" if self.b == TASK_FIELDS["context"] else "id"),
                  "TASKCMP": f"r{self.dst}, execname, s{self.imm}",
                  "SNAPSHOT": ""}
        text = fields.get(name)
        if text is None:
            text = f"r{self.dst}, r{self.a}" + (f", r{self.b}" if BINARY_FIRST <= self.op <= BINARY_LAST else "")
        return f"{name} {text}".rstrip()


@record(frozen=True)
class AggDesc:
    id: int
    func: int  # SDT_AGG_*
    nkeys: int
    nvals: int
    low: int = 0  # signed
    step: int = 0
    levels: int = 0


@record(frozen=True)
class ProgramForm:
    """A program's parts, as the runtime reads them."""

    insns: tuple[Insn, ...]
    aggs: tuple[AggDesc, ...] = ()
    consts: tuple[int, ...] = ()  # u64
    probes: tuple[int, ...] = ()  # probe keys, ascending
    strings: bytes = b""
    nargs: int = 0
    version: int = VALUES["SDT_PROGRAM_VERSION"]
    magic: int = VALUES["SDT_PROGRAM_MAGIC"]
    flags: int = 0
    guard: tuple[int, int, int, int, int] = NO_GUARD  # argument, shift, flip, lo, span: the predicate's first test


def encode(p: ProgramForm) -> bytes:
    """The bytes sdt_enable_program is given. Fields out of their C types' range raise struct.error."""
    body = b"".join(_INSN.pack(i.op, i.dst, i.a, i.b, i.imm) for i in p.insns)
    body += b"".join(_DESC.pack(d.id, d.func, d.nkeys, d.nvals, d.low & (2**64 - 1), d.step, d.levels, 0)
                     for d in p.aggs)
    body += b"".join(struct.pack("<Q", c & (2**64 - 1)) for c in p.consts)
    body += b"".join(struct.pack("<I", k) for k in p.probes)
    body += p.strings
    size = _HEADER.size + len(body)
    arg, shift, flip, lo, span = p.guard
    return _HEADER.pack(p.magic, p.version, len(p.insns), size, len(p.consts), len(p.aggs), p.nargs,
                        len(p.strings), len(p.probes), p.flags, arg, shift, flip, 0, 0, 0, 0, 0, lo, span) + body


def decode(data: bytes) -> ProgramForm:
    """The parts of a program's bytes, trusting its counts (for tests and listings; the runtime verifies)."""
    (magic, version, ninsns, _size, nconsts, naggs, nargs, nstrings, nprobes, flags, garg, gshift, gflip, *_pad,
     glo, gspan) = _HEADER.unpack_from(data)
    at = _HEADER.size
    insns = tuple(Insn(*_INSN.unpack_from(data, at + k * _INSN.size)) for k in range(ninsns))
    at += ninsns * _INSN.size
    aggs = []
    for k in range(naggs):
        id_, func, nkeys, nvals, low, step, levels, _ = _DESC.unpack_from(data, at + k * _DESC.size)
        aggs.append(AggDesc(id_, func, nkeys, nvals, low - (1 << 64) if low >> 63 else low, step, levels))
    at += naggs * _DESC.size
    consts = struct.unpack_from(f"<{nconsts}Q", data, at)
    at += 8 * nconsts
    probes = struct.unpack_from(f"<{nprobes}I", data, at)
    at += 4 * nprobes
    return ProgramForm(insns, tuple(aggs), consts, probes, data[at:at + nstrings], nargs, version, magic, flags,
                       (garg, gshift, gflip, glo, gspan))


def listing(data: bytes) -> list[str]:
    """One line per instruction (and the guard first, when it has one): what the program does, for a reader."""
    form = decode(data)
    arg, shift, flip, lo, span = form.guard
    head = [] if form.guard == NO_GUARD else [f"guard: arg{arg} << {shift} ^ {flip} << 63, {lo:#x} + {span:#x}"]
    return head + [f"{k:3}: {insn}" for k, insn in enumerate(form.insns)]
