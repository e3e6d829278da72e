"""x86-64 site forms, decoded back with Capstone from bytes Keystone and gas assembled."""

from __future__ import annotations

import json
import re

import keystone
from booted import Booted
from helpers import compile_c, final_link, partial_link, run, sdtgen

from sdtgen.arch.base import CALL, COND, REF, TAIL
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
    assert (jcc.form, jcc.start, jcc.length) == (COND, 10, 6)
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


def execute(code: bytes) -> tuple[int, int]:
    """Run ``code`` then int3 in Unicorn at a kernel address; (RIP after it, the trap count)."""
    from unicorn import UC_ARCH_X86, UC_HOOK_INTR, UC_MODE_64, Uc
    from unicorn.x86_const import UC_X86_REG_RIP, UC_X86_REG_RSP

    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    uc.mem_map(0x1000, 0x2000)
    uc.mem_write(0x1000, code + b"\xcc")
    uc.mem_write(0x2800, (0x1000 + len(code)).to_bytes(8, "little"))  # where a ret goes: the int3
    uc.reg_write(UC_X86_REG_RSP, 0x2800)
    traps = []

    def on_trap(uc, intno, user):
        traps.append(uc.reg_read(UC_X86_REG_RIP))
        uc.emu_stop()

    uc.hook_add(UC_HOOK_INTR, on_trap)
    uc.emu_start(0x1000, 0x1000 + 0x1000)
    return traps[0] - 0x1000, len(traps)


def test_the_breakpoint_agrees_with_keystone_and_capstone():
    cs = ARCH.disassembler()
    assert ARCH.breakpoint(5) == asm("int3") and next(cs.disasm(ARCH.breakpoint(5), 0)).mnemonic == "int3"


def test_site_matches_only_the_exact_call_to_the_stub():
    site, stub = 0xFFFFFFFF80000100, 0xFFFFFFFF80000020
    call = asm(f"call {stub:#x}", site)
    assert ARCH.match_site(call, site, CALL, 5, stub, None) == 5
    assert ARCH.match_site(call, site, CALL, 5, stub + 16, None) is None
    assert ARCH.match_site(call, site, TAIL, 5, stub, None) is None
    assert ARCH.match_site(asm(f"jmp {stub:#x}", site)[:5], site, TAIL, 5, stub, None) == 5
    assert ARCH.match_site(bytes.fromhex("0f1f440000"), site, CALL, 5, stub, None) is None  # a 5-byte NOP


# gcc -mindirect-branch-cs-prefix puts a CS prefix on calls to retpoline thunks that take their target in
# r8..r15 (Linux then rewrites them in place); a loop keeping the pointer in a callee-saved register gets one.
CS_SOURCE = """
typedef void (*fn_t)(long);
long loop(fn_t p, long a, long b, long c, long d) {
\tfor (long i = 0; i < a; i++)
\t\tp(i + b + c + d);
\treturn a + b;
}
"""
RETPOLINE = ("-mindirect-branch=thunk-extern", "-mindirect-branch-cs-prefix")


def objdump_insns(obj) -> list[tuple[int, int, str]]:
    """(offset, length, text) of each instruction objdump decodes in .text."""
    out = []
    for line in run(["objdump", "-d", "--section=.text", str(obj)]).stdout.splitlines():
        m = re.match(r"\s+([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t(.*)$", line)
        if m:
            out.append((int(m[1], 16), len(m[2].split()), m[3]))
    return out


def test_cs_prefixed_call_is_one_site_from_its_prefix(tmp_path):
    obj = compile_c(tmp_path, "cs", CS_SOURCE, *RETPOLINE)
    (cs_call,) = [i for i in objdump_insns(obj) if i[2].startswith("cs call")]
    scanned = json.loads(sdtgen("scan", obj, "--prefix", "__x86_indirect_thunk_", "--json", check=True).stdout)
    assert [(s["offset"], s["length"], s["form"]) for s in scanned["sites"]] == [(cs_call[0], 6, CALL)] == [
        (cs_call[0], cs_call[1], CALL)]


def test_a_byte_2e_ending_the_previous_instruction_is_not_a_prefix(tmp_path):
    """movzbl 0x2e(%rdi),%edi; call probe: the 2e is a displacement, and the site is the 5-byte call."""
    obj = compile_c(tmp_path, "disp", """
        struct s { char pad[0x2e]; unsigned char x; };
        extern void __dtrace_sdt_raw_x(long);
        long f(struct s *p) { __dtrace_sdt_raw_x(p->x); return 1; }
    """)
    insns = objdump_insns(obj)
    call = next(i for i in insns if i[2].startswith("call"))
    before = insns[insns.index(call) - 1]
    assert before[2].endswith("0x2e(%rdi),%edi") and before[0] + before[1] == call[0]  # the byte before is 2e
    scanned = json.loads(sdtgen("scan", obj, "--json", check=True).stdout)
    assert [(s["offset"], s["length"]) for s in scanned["sites"]] == [(call[0], call[1])] == [(call[0], 5)]


def test_cs_prefixed_site_is_checked_patched_with_a_six_byte_nop_and_fires(tmp_path):
    """The same gcc object with its thunk renamed to a probe: gen, link, check and boot take the 6 bytes."""
    obj = compile_c(tmp_path, "cs", CS_SOURCE, *RETPOLINE)
    (cs_call,) = [i for i in objdump_insns(obj) if i[2].startswith("cs call")]
    thunk = re.search(r"__x86_indirect_thunk_\w+", run(["objdump", "-dr", str(obj)]).stdout)[0]
    probe = tmp_path / "probe.o"
    run(["objcopy", f"--redefine-sym={thunk}=__dtrace_sdt_cs_tick", str(obj), str(probe)])
    partial = partial_link(tmp_path, "kernel", probe)
    image = final_link(tmp_path, partial)
    proc = sdtgen("check", partial, image)
    assert proc.returncode == 0 and "1 stable" in proc.stdout, proc.stdout + proc.stderr
    b = Booted(image)
    try:
        (site,) = b.session.target.runtime.sites
        loop = b.session.image.elf.symbol_map()["loop"].value
        assert (site.addr, site.length) == (loop + cs_call[0], 6)
        patched = b.session.target.machine.read(site.addr, 6)
        (nop,) = ARCH.disassembler().disasm(bytes(patched), site.addr)
        assert (nop.mnemonic, nop.size) == ("nop", 6)  # one NOP over the prefix and the call
        b.events()
        assert b.session.run("loop:long", [0, 3, 10, 0, 0]) == 13  # disarmed: the NOP runs through
        assert not [e for e in b.events() if e["event"] == "fire"]
        b.session.enable("cs:::tick")
        assert b.session.run("loop:long", [0, 3, 10, 0, 0]) == 13  # armed: the breakpoint fires and resumes
        assert [e["probe"] for e in b.events() if e["event"] == "fire"] == ["cs:::tick"] * 3
    finally:
        b.session.close()
