"""x86-64: call/jmp rel32 sites, GOT calls, and the System V calling convention."""

from __future__ import annotations

import struct
from typing import ClassVar

from sdtgen.arch.base import CALL, REF, TAIL, Arch, Decoded, SiteShape, UnsupportedReloc

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
                return SiteShape(REF, field - 2, 6, "conditional tail jump (jcc rel32)")
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
        form = {"call": CALL, "jmp": TAIL}.get(insn.mnemonic, REF)
        target = slot = None
        raw = bytes(insn.bytes)
        if form != REF:
            if raw[-5:-4] in (b"\xe8", b"\xe9"):
                target = int(insn.op_str, 16)
            elif raw[:2] in (b"\xff\x15", b"\xff\x25") and len(raw) == 6:
                slot = addr + 6 + struct.unpack_from("<i", raw, 2)[0]
                target = read_pointer(slot)
            else:
                form = REF
        return Decoded(form, insn.size, target, slot, text)


ARCH = X86_64()
