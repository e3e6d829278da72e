"""RISC-V 64: auipc+jalr call sites that linker relaxation may shrink to jal or c.j.

A probe call compiles to `auipc ra, 0; jalr ra, 0(ra)` (8 bytes, R_RISCV_CALL_PLT
paired with R_RISCV_RELAX) and a tail call to `auipc t1; jalr zero, 0(t1)`.
With relaxation the final link may rewrite them to `jal ra` / `j` (4 bytes)
or `c.j` (2 bytes) and delete the freed bytes, moving all code after them.
The runtime's encoders (sdtgen/runtime/arch/sdt_riscv64.c) write every length it meets.
"""

from __future__ import annotations

import struct

from sdtgen.arch.base import (
    CALL,
    REF,
    TAIL,
    Arch,
    Decoded,
    EmulatorFacts,
    Flow,
    QemuMachine,
    SiteShape,
    Toolchain,
    UnsupportedReloc,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at start-up
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import ClassVar

R_RISCV_32, R_RISCV_64, R_RISCV_BRANCH, R_RISCV_JAL, R_RISCV_CALL, R_RISCV_CALL_PLT = 1, 2, 16, 17, 18, 19
R_RISCV_GOT_HI20, R_RISCV_PCREL_HI20, R_RISCV_HI20, R_RISCV_LO12_I, R_RISCV_LO12_S = 20, 23, 26, 27, 28
R_RISCV_RVC_BRANCH, R_RISCV_RVC_JUMP, R_RISCV_32_PCREL = 44, 45, 57

NOP = 0x00000013  # addi zero, zero, 0
RET, C_RET = 0x00008067, 0x8082  # jalr zero, 0(ra); c.jr ra
EBREAK, C_EBREAK = 0x00100073, 0x9002
RA, ZERO, T1 = 1, 0, 6
RISCV_OP_IMM = 2  # capstone.riscv.RISCV_OP_IMM, without importing Capstone at start-up


def _sext(value: int, bits: int) -> int:
    return value - (1 << bits) if value & (1 << (bits - 1)) else value


def branch_at(code: bytes, addr: int) -> tuple[str, int, int] | None:
    """(form, length, target) of a call or tail jump at the start of ``code``, whatever its relaxed shape."""
    if len(code) >= 2 and code[0] & 3 != 3:  # compressed
        half = struct.unpack_from("<H", code)[0]
        if half & 0xE003 in (0xA001, 0x2001):  # c.j, or c.jal (RV32 only, never on RV64)
            imm = _c_j_offset(half)
            return (TAIL if half & 0xE003 == 0xA001 else CALL), 2, addr + imm
        return None
    if len(code) < 4:
        return None
    w = struct.unpack_from("<I", code)[0]
    rd = w >> 7 & 0x1F
    if w & 0x7F == 0x6F and rd in (RA, ZERO):  # jal
        imm = (w >> 31 & 1) << 20 | (w >> 12 & 0xFF) << 12 | (w >> 20 & 1) << 11 | (w >> 21 & 0x3FF) << 1
        return (CALL if rd == RA else TAIL), 4, addr + _sext(imm, 21)
    if w & 0x7F == 0x17 and len(code) >= 8:  # auipc rd, hi; jalr rd2, lo(rd)
        j = struct.unpack_from("<I", code, 4)[0]
        jrd, rs1 = j >> 7 & 0x1F, j >> 15 & 0x1F
        if j & 0x707F == 0x67 and rs1 == rd and jrd in (RA, ZERO):
            target = addr + _sext(w & 0xFFFFF000, 32) + _sext(j >> 20, 12)
            return (CALL if jrd == RA else TAIL), 8, target
    return None


def _c_j_offset(half: int) -> int:
    """The offset of c.j / c.jal: imm[11|4|9:8|10|6|7|3:1|5] in bits 12..2."""
    def bit(n: int) -> int:
        return half >> n & 1

    imm = (bit(12) << 11 | bit(11) << 4 | bit(10) << 9 | bit(9) << 8 | bit(8) << 10 | bit(7) << 6 |
           bit(6) << 7 | bit(5) << 3 | bit(4) << 2 | bit(3) << 1 | bit(2) << 5)
    return _sext(imm, 12)


class RiscV64(Arch):
    name = "riscv64"
    title = "RISC-V 64"
    order = 3
    machine = 243
    bits = 64
    toolchain = Toolchain("riscv64-linux-gnu", ("riscv64",), "riscv64-linux-gnu-", "gcc-riscv64-linux-gnu",
                          "binutils-riscv64-linux-gnu", ("-march=rv64imac", "-mabi=lp64", "-mcmodel=medany"),
                          "elf64-littleriscv", "riscv", "reachable with -mcmodel=medany")
    # virt with -bios none: every hart starts in M-mode at 0x80000000 (where RAM starts); the SiFive test
    # device powers off.
    qemu = QemuMachine("qemu-system-riscv64", "qemu-system-misc", "virt", ("-bios", "none"), ram_base=0x80000000,
                       module_in_ram=True)
    reloc_names: ClassVar[dict[int, str]] = {
        R_RISCV_32: "R_RISCV_32", R_RISCV_64: "R_RISCV_64", R_RISCV_BRANCH: "R_RISCV_BRANCH",
        R_RISCV_JAL: "R_RISCV_JAL", R_RISCV_CALL: "R_RISCV_CALL", R_RISCV_CALL_PLT: "R_RISCV_CALL_PLT",
        R_RISCV_GOT_HI20: "R_RISCV_GOT_HI20", R_RISCV_PCREL_HI20: "R_RISCV_PCREL_HI20",
        R_RISCV_HI20: "R_RISCV_HI20", R_RISCV_LO12_I: "R_RISCV_LO12_I", R_RISCV_LO12_S: "R_RISCV_LO12_S",
        R_RISCV_RVC_BRANCH: "R_RISCV_RVC_BRANCH", R_RISCV_RVC_JUMP: "R_RISCV_RVC_JUMP",
        R_RISCV_32_PCREL: "R_RISCV_32_PCREL",
    }
    # R_RISCV_32, 64, 32_PCREL; a label difference is an ADD32/64 and SUB32/64 pair at one field.
    data_relocs: ClassVar[dict[int, tuple[int, bool]]] = {1: (4, False), 2: (8, False), 57: (4, True)}
    data_pairs: ClassVar[dict[int, tuple[str, int]]] = {35: ("add", 4), 36: ("add", 8), 39: ("sub", 4),
                                                         40: ("sub", 8)}
    understood = frozenset(reloc_names)
    relative_reloc = 3  # R_RISCV_RELATIVE
    kernel_base = 0xFFFFFFFF80000000
    relaxes = True
    goto_nop = struct.pack("<I", NOP)  # never c.nop: the site must hold a jal

    def classify(self, code: memoryview, field: int, rtype: int, executable: bool,
                 boundary: int | Callable[[], int] = 0) -> SiteShape:
        if rtype not in self.understood:
            raise UnsupportedReloc(rtype)
        if not executable:
            return SiteShape(REF, field, 0, "data reference")
        if rtype in (R_RISCV_CALL, R_RISCV_CALL_PLT, R_RISCV_JAL, R_RISCV_RVC_JUMP):
            found = branch_at(bytes(code[field:field + 8]), 0)
            if found:
                form, length, _ = found
                what = {8: "auipc+jalr", 4: "jal", 2: "c.j"}[length]
                return SiteShape(form, field, length, what)
        if rtype in (R_RISCV_BRANCH, R_RISCV_RVC_BRANCH):
            return SiteShape(REF, field, 0, "conditional branch")
        return SiteShape(REF, field, 0, "address load")

    def capstone(self):
        import capstone

        return capstone.Cs(capstone.CS_ARCH_RISCV, capstone.CS_MODE_RISCV64 | capstone.CS_MODE_RISCVC)

    def decode(self, code: bytes, addr: int, read_pointer) -> Decoded | None:
        insns = list(self.disassembler().disasm(code[:8], addr, 2))
        if not insns:
            return None
        found = branch_at(code, addr)
        if found is None:
            i = insns[0]
            return Decoded(REF, i.size, None, None, f"{i.mnemonic} {i.op_str}".strip())
        form, length, target = found
        text = "; ".join(f"{i.mnemonic} {i.op_str}".strip() for i in insns[:1 if length < 8 else 2])
        return Decoded(form, length, target, None, text)

    def branches_to(self, code: bytes, addr: int, targets: set[int]) -> list[int]:
        out = []
        for i in range(0, len(code) - 1, 2):
            found = branch_at(code[i:i + 8], addr + i)
            if found and found[2] in targets:
                out.append(addr + i)
        return out


    stack_registers = frozenset({"sp", "s0", "fp"})

    def flow(self, insn) -> tuple[str, int | None]:
        """From the encoding: Capstone 5 gives RISC-V's jumps no consistent groups, and prints jalr's rs1, not
        its rd."""
        code = bytes(insn.bytes)
        last = insn.operands[-1] if insn.operands else None
        target = (insn.address + last.imm) & (1 << 64) - 1 if last is not None and last.type == RISCV_OP_IMM else None
        if len(code) == 2:
            h = struct.unpack("<H", code)[0]
            rs1 = h >> 7 & 0x1F
            if h == C_EBREAK:
                return Flow.STOPS, None
            if h & 0xE003 == 0xA001:  # c.j (c.jal is RV32's: on RV64 that encoding is c.addiw)
                return Flow.JUMPS, target
            if h & 0xF07F == 0x8002 and rs1:  # c.jr
                return (Flow.RETURNS, None) if rs1 == RA else (Flow.JUMPS, None)
            if h & 0xF07F == 0x9002 and rs1:  # c.jalr
                return Flow.CALLS, None
            if h & 0xC003 == 0xC001:  # c.beqz, c.bnez
                return Flow.BRANCHES, target
            return Flow.NEXT, None
        w = struct.unpack("<I", code[:4])[0]
        op, rd, rs1 = w & 0x7F, w >> 7 & 0x1F, w >> 15 & 0x1F
        if w == EBREAK or w == 0xC0001073:  # ebreak, unimp
            return Flow.STOPS, None
        if op == 0x6F:  # jal
            return (Flow.JUMPS if rd == ZERO else Flow.CALLS), target
        if op == 0x67:  # jalr
            if rd != ZERO:
                return Flow.CALLS, None
            return (Flow.RETURNS, None) if rs1 == RA and w >> 20 == 0 else (Flow.JUMPS, None)
        if op == 0x63:  # beq, bne, blt, bge, bltu, bgeu
            return Flow.BRANCHES, target
        return Flow.NEXT, None

    def spills(self, insn) -> int:
        """A store (sd, sw, c.sdsp...) through sp or s0."""
        m = insn.mnemonic
        if m.startswith("c."):
            m = m[2:]
        if m not in ("sd", "sw", "sh", "sb", "sdsp", "swsp") or "(" not in insn.op_str:
            return 0
        return 1 if insn.op_str.rsplit("(", 1)[1].rstrip(")") in self.stack_registers else 0

    def breakpoint(self, length: int) -> bytes:
        return struct.pack("<H", C_EBREAK) if length == 2 else struct.pack("<I", EBREAK)

    def match_site(self, code: bytes, site: int, form: str, length: int, stub: int, read_pointer) -> int | None:
        found = branch_at(code, site)
        if found and found[0] == form and found[2] == stub and found[1] <= length:
            return found[1]
        return None

    clock_name = "cycle"
    # The LP64 ABI; Unicorn 2.1.4 reports ebreak through the invalid-instruction hook.
    emulator = EmulatorFacts(("UC_ARCH_RISCV", "UC_MODE_RISCV64"), ("riscv_const", "UC_RISCV_REG_"), "pc", "sp",
                             ("a0",), ("a0", "a1", "a2", "a3", "a4", "a5"), link="ra", trap_on_invalid=True,
                             return_insn=struct.pack("<I", RET),
                             # rdcycle a0 (csrr a0, cycle): Unicorn 2.1.4 traps on rdtime
                             clock=struct.pack("<I", 0xC0002573),
                             # auipc a0, 0; ld a0, 16(a0) (the literal); ld a0, 0(a0); ret; the literal
                             load_word=(struct.pack("<4I", 0x00000517, 0x01053503, 0x00053503, RET), b""))


ARCH = RiscV64()
