"""The instructions a CPU may be found executing inside a probe site: what the torture tests compare with."""

from __future__ import annotations


def legit_instructions(arch, addr: int, *states: bytes) -> frozenset[tuple[int, bytes]]:
    """(address, bytes) of every instruction a CPU can be at in the site, in any of ``states``, and the
    protocol's transient breakpoint. Reachable ones only: from the site's start, on past each instruction
    that falls through (a call returns past itself); the bytes behind a breakpoint, a return or a jump are
    never executed, whatever Capstone would make of them."""
    from capstone import CS_GRP_INT, CS_GRP_IRET, CS_GRP_JUMP, CS_GRP_RET

    cs = arch.capstone()
    cs.detail = True
    legit = {(addr, arch.breakpoint(2))}  # the protocol's transient breakpoint (int3, c.ebreak)
    for code in states:
        for insn in cs.disasm(code, addr):
            legit.add((insn.address, bytes(insn.bytes)))
            if any(insn.group(g) for g in (CS_GRP_INT, CS_GRP_IRET, CS_GRP_JUMP, CS_GRP_RET)) \
                    or bytes(insn.bytes) in (arch.breakpoint(2), arch.breakpoint(4)):
                break
    return frozenset(legit)
