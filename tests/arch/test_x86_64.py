"""x86-64 site forms, decoded back with Capstone from bytes Keystone and gas assembled."""

from __future__ import annotations

import keystone

from sdtgen.arch.base import CALL, REF, TAIL
from sdtgen.arch.x86_64 import ARCH, R_X86_64_GOTPCRELX, R_X86_64_PLT32

KS = keystone.Ks(keystone.KS_ARCH_X86, keystone.KS_MODE_64)


def asm(text: str, addr: int = 0) -> bytes:
    return bytes(KS.asm(text, addr)[0])


def test_classify_call_tail_and_conditional_jump():
    code = memoryview(bytes.fromhex("e800000000" "e900000000" "0f8500000000"))
    assert ARCH.classify(code, 1, R_X86_64_PLT32, True).form == CALL
    tail = ARCH.classify(code, 6, R_X86_64_PLT32, True)
    assert (tail.form, tail.start, tail.length) == (TAIL, 5, 5)
    jcc = ARCH.classify(code, 12, R_X86_64_PLT32, True)
    assert (jcc.form, jcc.start, jcc.length) == (REF, 10, 6)
    assert ARCH.classify(code, 1, R_X86_64_PLT32, False).form == REF  # not in executable code


def test_classify_got_calls():
    code = memoryview(bytes.fromhex("ff1500000000" "ff2500000000" "488b0500000000"))
    assert ARCH.classify(code, 2, R_X86_64_GOTPCRELX, True).form == CALL
    assert ARCH.classify(code, 8, R_X86_64_GOTPCRELX, True).form == TAIL
    assert ARCH.classify(code, 15, R_X86_64_GOTPCRELX, True).form == REF


def test_decode_direct_branches_at_kernel_addresses():
    base = 0xFFFFFFFF80001000
    target = 0xFFFFFFFF80000040
    call = ARCH.decode(asm(f"call {target:#x}", base), base, None)
    assert (call.form, call.length, call.target) == (CALL, 5, target)
    jmp = ARCH.decode(asm(f"jmp {target:#x}", base) + b"\x90" * 8, base, None)
    assert (jmp.form, jmp.target) == (TAIL, target)


def test_decode_call_through_a_got_slot():
    base = 0xFFFFFFFF80001000
    d = ARCH.decode(bytes.fromhex("ff1500100000"), base, lambda slot: {base + 6 + 0x1000: 0x1234}[slot])
    assert (d.form, d.length, d.slot, d.target) == (CALL, 6, base + 6 + 0x1000, 0x1234)


def test_other_instructions_are_not_sites():
    d = ARCH.decode(bytes.fromhex("0f1f440000"), 0, None)
    assert d.form == REF and d.text.startswith("nop")
