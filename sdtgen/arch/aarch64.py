"""AArch64: bl/b sites (CALL26/JUMP26), arguments in x0..x5, nop, ret and brk."""

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

R_AARCH64_ABS64, R_AARCH64_ABS32, R_AARCH64_PREL64, R_AARCH64_PREL32 = 257, 258, 260, 261
R_AARCH64_ADR_PREL_PG_HI21, R_AARCH64_ADD_ABS_LO12_NC = 275, 277
R_AARCH64_JUMP26, R_AARCH64_CALL26 = 282, 283
R_AARCH64_MOVW = range(263, 271)
R_AARCH64_ADR_GOT_PAGE, R_AARCH64_LD64_GOT_LO12_NC = 311, 312

NOP = 0xD503201F
RET = 0xD65F03C0
BRK = 0xD4200000 | (0x5D7 << 5)  # brk #0x5d7, an immediate of sdtgen's own
ARM64_OP_IMM = 2  # capstone.arm64.ARM64_OP_IMM, without importing Capstone at start-up


def _insn(word: int) -> bytes:
    return struct.pack("<I", word)


def _imm26(word: int, at: int) -> int:
    off = (word & 0x03FFFFFF) << 2
    return at + (off - (1 << 28) if off & (1 << 27) else off)


class AArch64(Arch):
    name = "aarch64"
    title = "AArch64"
    order = 2
    machine = 183
    bits = 64
    # -mno-outline-atomics: no libgcc atomics helpers, as Linux builds.
    toolchain = Toolchain("aarch64-linux-gnu", ("aarch64",), "aarch64-linux-gnu-", "gcc-aarch64-linux-gnu",
                          "binutils-aarch64-linux-gnu", ("-mgeneral-regs-only", "-mno-outline-atomics"),
                          "elf64-littleaarch64", "aarch64", "the upper half")
    # virt: the ELF loaded at its link address, entered at EL1; PSCI over HVC, GICv2, PL011; RAM at 1 GiB.
    qemu = QemuMachine("qemu-system-aarch64", "qemu-system-arm", "virt", ("-cpu", "cortex-a57"),
                       ram_base=0x40000000)
    reloc_names: ClassVar[dict[int, str]] = {
        R_AARCH64_ABS64: "R_AARCH64_ABS64", R_AARCH64_ABS32: "R_AARCH64_ABS32",
        R_AARCH64_PREL64: "R_AARCH64_PREL64", R_AARCH64_PREL32: "R_AARCH64_PREL32",
        R_AARCH64_ADR_PREL_PG_HI21: "R_AARCH64_ADR_PREL_PG_HI21",
        R_AARCH64_ADD_ABS_LO12_NC: "R_AARCH64_ADD_ABS_LO12_NC",
        R_AARCH64_JUMP26: "R_AARCH64_JUMP26", R_AARCH64_CALL26: "R_AARCH64_CALL26",
        R_AARCH64_ADR_GOT_PAGE: "R_AARCH64_ADR_GOT_PAGE", R_AARCH64_LD64_GOT_LO12_NC: "R_AARCH64_LD64_GOT_LO12_NC",
        **{t: f"R_AARCH64_MOVW_UABS_G{(t - 263) // 2}{'_NC' if t % 2 == 0 else ''}" for t in R_AARCH64_MOVW},
    }
    # R_AARCH64_ABS64, ABS32, PREL64, PREL32
    data_relocs: ClassVar[dict[int, tuple[int, bool]]] = {257: (8, False), 258: (4, False), 260: (8, True),
                                                           261: (4, True)}
    understood = frozenset(reloc_names)
    branch_mnemonics = frozenset({"bl", "b"})
    relative_reloc = 1027  # R_AARCH64_RELATIVE
    kernel_base = 0xFFFF800008000000
    goto_nop = struct.pack("<I", NOP)

    def classify(self, code: memoryview, field: int, rtype: int, executable: bool,
                 boundary: int | Callable[[], int] = 0) -> SiteShape:
        if rtype not in self.understood:
            raise UnsupportedReloc(rtype)
        if not executable:
            return SiteShape(REF, field, 0, "data reference")
        if rtype in (R_AARCH64_CALL26, R_AARCH64_JUMP26) and field + 4 <= len(code):
            word = struct.unpack_from("<I", code, field)[0]
            if word & 0xFC000000 == 0x94000000:
                return SiteShape(CALL, field, 4, "bl")
            if word & 0xFC000000 == 0x14000000:
                return SiteShape(TAIL, field, 4, "b")
        if rtype in (R_AARCH64_ADR_GOT_PAGE, R_AARCH64_LD64_GOT_LO12_NC):
            return SiteShape(REF, field, 0, "GOT load")
        return SiteShape(REF, field, 0, "address load")

    def capstone(self):
        import capstone

        return capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)

    def decode(self, code: bytes, addr: int, read_pointer) -> Decoded | None:
        insn = next(self.disassembler().disasm(code[:4], addr, 1), None)
        if insn is None:
            return None
        text = f"{insn.mnemonic} {insn.op_str}".strip()
        word = struct.unpack_from("<I", code)[0]
        if word & 0xFC000000 in (0x94000000, 0x14000000):
            form = CALL if word & 0x80000000 else TAIL
            return Decoded(form, 4, _imm26(word, addr), None, text)
        return Decoded(REF, 4, None, None, text)

    def branches_to(self, code: bytes, addr: int, targets: set[int]) -> list[int]:
        out = []
        for i in range(0, len(code) - 3, 4):
            word = struct.unpack_from("<I", code, i)[0]
            if word & 0x7C000000 == 0x14000000 and _imm26(word, addr + i) in targets:
                out.append(addr + i)
        return out


    stack_registers = frozenset({"sp", "x29"})
    _conditional = ("cbz", "cbnz", "tbz", "tbnz")

    def flow(self, insn) -> tuple[str, int | None]:
        m = insn.mnemonic
        last = insn.operands[-1] if insn.operands else None
        target = last.imm & (1 << 64) - 1 if last is not None and last.type == ARM64_OP_IMM else None
        if m in ("ret", "eret", "retaa", "retab"):
            return Flow.RETURNS, None
        if m in ("bl", "blr"):
            return Flow.CALLS, target if m == "bl" else None
        if m in ("b", "br"):
            return Flow.JUMPS, target if m == "b" else None
        if m.startswith("b.") or m in self._conditional:
            return Flow.BRANCHES, target
        if m in ("brk", "udf", "hlt"):
            return Flow.STOPS, None
        return Flow.NEXT, None

    def spills(self, insn) -> int:
        """A store (str, stp, stur...) through sp or x29: one for each register it stores."""
        if not insn.mnemonic.startswith("st") or "[" not in insn.op_str:
            return 0
        regs, _, address = insn.op_str.partition("[")
        if address.split(",")[0].split("]")[0].strip() not in self.stack_registers:
            return 0
        return sum(1 for r in regs.split(",") if r.strip() and r.strip() not in ("xzr", "wzr"))

    def breakpoint(self, length: int) -> bytes:
        return _insn(BRK)

    def match_site(self, code: bytes, site: int, form: str, length: int, stub: int, read_pointer) -> int | None:
        if len(code) < 4 or length != 4 or form not in (CALL, TAIL):  # bl and b, 4 bytes, and nothing else
            return None
        delta = stub - site
        if delta % 4 or not -(1 << 27) <= delta < (1 << 27):
            return None  # out of bl/b range: the linker would have used a veneer, not this site
        op = 0x94000000 if form == CALL else 0x14000000
        return 4 if code[:4] == _insn(op | ((delta >> 2) & 0x03FFFFFF)) else None

    clock_name = "cntvct_el0"
    # AAPCS64; brk raises EXCP_BKPT (7), with the PC on the brk.
    emulator = EmulatorFacts(("UC_ARCH_ARM64", "UC_MODE_ARM"), ("arm64_const", "UC_ARM64_REG_"), "pc", "sp", ("x0",),
                             ("x0", "x1", "x2", "x3", "x4", "x5"), link="x30", traps=frozenset({7}),
                             return_insn=_insn(RET),
                             clock=_insn(0xD53BE040),  # mrs x0, cntvct_el0
                             clock_hz=_insn(0xD53BE000),  # mrs x0, cntfrq_el0
                             # ldr x0, #16 (the literal); ldr x0, [x0]; ret; nop; the literal
                             load_word=(_insn(0x58000080) + _insn(0xF9400000) + _insn(RET) + _insn(NOP), b""))


ARCH = AArch64()
