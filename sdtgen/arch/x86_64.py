"""x86-64: call/jmp rel32 sites, GOT calls, and the System V calling convention."""

from __future__ import annotations

import struct
from functools import cached_property
from typing import ClassVar

from sdtgen.arch.base import CALL, COND, REF, TAIL, Arch, Decoded, Regs, SiteShape, UnsupportedReloc

R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32 = 1, 2, 4
R_X86_64_GOTPCREL, R_X86_64_32, R_X86_64_32S = 9, 10, 11
R_X86_64_PC64, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX = 24, 41, 42

_BRANCH = {0xE8: (CALL, "call rel32"), 0xE9: (TAIL, "jmp rel32")}
_GOT_BRANCH = {b"\xff\x15": (CALL, "call *GOT"), b"\xff\x25": (TAIL, "jmp *GOT")}


_RELOC_NAMES = """
    NONE 64 PC32 GOT32 PLT32 COPY GLOB_DAT JUMP_SLOT RELATIVE GOTPCREL 32 32S 16 PC16 8 PC8 DTPMOD64 DTPOFF64
    TPOFF64 TLSGD TLSLD DTPOFF32 GOTTPOFF TPOFF32 PC64 GOTOFF64 GOTPC32 GOT64 GOTPCREL64 GOTPC64 GOTPLT64
    PLTOFF64 SIZE32 SIZE64 GOTPC32_TLSDESC TLSDESC_CALL TLSDESC IRELATIVE RELATIVE64 39 40 GOTPCRELX REX_GOTPCRELX
"""


class X86_64(Arch):
    name = "x86_64"
    machine = 62
    bits = 64
    reloc_names: ClassVar[dict[int, str]] = dict(enumerate(f"R_X86_64_{n}" for n in _RELOC_NAMES.split()))
    # The relocations a probe reference can carry that sdtgen knows how to classify.
    understood = frozenset({R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32, R_X86_64_GOTPCREL, R_X86_64_32,
                            R_X86_64_32S, R_X86_64_PC64, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX})

    branch_mnemonics = frozenset({"call", "jmp", "je", "jne", "ja", "jae", "jb", "jbe", "jg", "jge", "jl", "jle",
                                  "js", "jns", "jo", "jno", "jp", "jnp"})

    def classify(self, code: memoryview, field: int, rtype: int, executable: bool) -> SiteShape:
        if rtype not in self.understood:
            raise UnsupportedReloc(rtype)
        if not executable:
            return SiteShape(REF, field, 0, "data reference")
        if rtype in (R_X86_64_PC32, R_X86_64_PLT32) and field >= 1:
            op = code[field - 1]
            if op in _BRANCH:
                form, what = _BRANCH[op]
                return SiteShape(form, field - 1, 5, what)
            if field >= 2 and code[field - 2] == 0x0F and 0x80 <= op <= 0x8F:
                return SiteShape(COND, field - 2, 6, "conditional tail jump (jcc rel32)")
            return SiteShape(REF, field, 0, "PC-relative address load")
        if rtype in (R_X86_64_GOTPCREL, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX) and field >= 2:
            got = _GOT_BRANCH.get(bytes(code[field - 2:field]))
            if got:
                return SiteShape(got[0], field - 2, 6, got[1])
            return SiteShape(REF, field, 0, "GOT load")
        return SiteShape(REF, field, 0, "absolute address load")

    def capstone(self):
        import capstone

        return capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)

    def decode(self, code: bytes, addr: int, read_pointer) -> Decoded | None:
        insn = next(self.disassembler().disasm(code, addr, 1), None)
        if insn is None:
            return None
        text = f"{insn.mnemonic} {insn.op_str}".strip()
        form = {"call": CALL, "jmp": TAIL}.get(insn.mnemonic, COND if insn.mnemonic in self.branch_mnemonics else REF)
        target = slot = None
        raw = bytes(insn.bytes)
        if form != REF:
            if raw[-5:-4] in (b"\xe8", b"\xe9") or (form == COND and raw[:1] == b"\x0f" and len(raw) == 6):
                target = int(insn.op_str, 16)
            elif raw[:2] in (b"\xff\x15", b"\xff\x25") and len(raw) == 6:
                slot = addr + 6 + struct.unpack_from("<i", raw, 2)[0]
                target = read_pointer(slot)
            else:
                form = REF
        return Decoded(form, insn.size, target, slot, text)


    # -- emulated boot -----------------------------------------------------------
    trap_interrupts = frozenset({3})  # int3
    relative_reloc = 8  # R_X86_64_RELATIVE
    kernel_base = 0xFFFFFFFF80000000
    word = "<Q"

    def nop(self, length: int) -> bytes:
        if length in NOPS:
            return NOPS[length]
        return NOPS[9] * (length // 9) + (NOPS[length % 9] if length % 9 else b"")

    def tail_return(self, length: int) -> bytes:
        return b"\xc3" + (self.nop(length - 1) if length > 1 else b"")

    def breakpoint(self, length: int) -> bytes:
        return b"\xcc"

    def match_site(self, code: bytes, site: int, form: str, length: int, stub: int, read_pointer) -> int | None:
        if length == 5 and form != COND:  # the common case first: call/jmp rel32, compared as integers
            return 5 if (len(code) >= 5 and code[0] == (0xE8 if form == CALL else 0xE9)
                         and int.from_bytes(code[1:5], "little", signed=True) == stub - site - 5) else None
        code = code[:length]
        if len(code) != length or not -(1 << 31) <= stub - site - 6 < (1 << 31) - 6:
            return None
        if form == COND:  # jcc rel32, left as it is: taken, it reaches the stub, which returns
            ok = length == 6 and code[0] == 0x0F and 0x80 <= code[1] <= 0x8F and code[2:] == _rel32(stub - site - 6)
        elif length == 5:
            ok = code == bytes([0xE8 if form == CALL else 0xE9]) + _rel32(stub - site - 5)
        elif length == 6 and code[:2] == (b"\xff\x15" if form == CALL else b"\xff\x25"):  # through the GOT
            slot = site + 6 + struct.unpack_from("<i", code, 2)[0]
            try:
                ok = read_pointer(slot) == stub
            except Exception:
                ok = False
        elif length == 6 and form == CALL:  # GNU ld and lld relax GOT calls: addr32 call
            ok = code == b"\x67\xe8" + _rel32(stub - site - 6)
        elif length == 6:  # ... and GOT jumps: jmp + nop
            ok = code == b"\xe9" + _rel32(stub - site - 5) + b"\x90"
        else:
            ok = False
        return length if ok else None

    def is_empty_stub(self, code: bytes) -> bool:
        return code[:1] == b"\xc3" or code[:5] == b"\xf3\x0f\x1e\xfa\xc3"  # ret, or endbr64; ret

    def trap_site(self, pc: int) -> int:
        return pc - 1  # int3 traps with the PC after it

    def unicorn(self):
        import unicorn

        return unicorn.UC_ARCH_X86, unicorn.UC_MODE_64

    def set_call(self, m, func: int, args: list[int], return_to: int, stack_top: int) -> None:
        for reg, value in zip(self.regs.args, args, strict=False):
            m.uc.reg_write(reg, value & 0xFFFFFFFFFFFFFFFF)
        sp = (stack_top & ~0xF) - 8  # at entry, (rsp + 8) is 16-byte aligned
        m.write(sp, struct.pack("<Q", return_to))
        m.uc.reg_write(self.regs.sp, sp)
        m.uc.reg_write(self.regs.pc, func)

    def return_address(self, m) -> int:
        sp = m.uc.reg_read(self.regs.sp)
        m.uc.reg_write(self.regs.sp, sp + struct.calcsize(self.word))
        return struct.unpack(self.word, m.read(sp, struct.calcsize(self.word)))[0]

    @cached_property
    def regs(self) -> Regs:
        from unicorn import x86_const as X

        return Regs(X.UC_X86_REG_RIP, X.UC_X86_REG_RSP, X.UC_X86_REG_RAX,
                    (X.UC_X86_REG_RDI, X.UC_X86_REG_RSI, X.UC_X86_REG_RDX, X.UC_X86_REG_RCX,
                     X.UC_X86_REG_R8, X.UC_X86_REG_R9))


# Intel's recommended multi-byte NOPs (SDM, "Recommended Multi-Byte Sequence of NOP Instruction").
# Fixed bytes: Keystone 0.9.2 encodes `nop dword ptr [rax+rax]` as 0f 18 24 00, not a NOP.
NOPS = {
    1: bytes.fromhex("90"),
    2: bytes.fromhex("6690"),
    3: bytes.fromhex("0f1f00"),
    4: bytes.fromhex("0f1f4000"),
    5: bytes.fromhex("0f1f440000"),
    6: bytes.fromhex("660f1f440000"),
    7: bytes.fromhex("0f1f8000000000"),
    8: bytes.fromhex("0f1f840000000000"),
    9: bytes.fromhex("660f1f840000000000"),
}


def _rel32(delta: int) -> bytes:
    return struct.pack("<i", delta)


ARCH = X86_64()
