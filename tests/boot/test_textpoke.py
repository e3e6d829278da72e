"""The patch protocols: which states a site passes through while other CPUs may run, as Capstone decodes them."""

from __future__ import annotations

import capstone
import pytest
from booted import Booted
from helpers import OTHER_ARCHES
from native_oracle import Call

from sdtgen.boot.textpoke import NAIVE, SAFE


def states(session, addr: int, new: bytes, protocol: str) -> list[bytes]:
    """The bytes at ``addr`` after every store of the write (what a CPU running in between may fetch)."""
    poke = session.smp.poke
    poke.protocol = protocol
    return [session.machine.read(addr, len(new)) for _ in poke.steps(addr, new)]


def first_insn(code: bytes, addr: int) -> tuple[str, str]:
    cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    insn = next(cs.disasm(code, addr), None)
    return (insn.mnemonic, insn.op_str) if insn else ("(bad)", "")


@pytest.fixture
def two(kernel):
    b = Booted(kernel.image, cpus=2)
    yield b
    b.session.close()


def test_x86_safe_passes_only_through_the_old_the_breakpoint_and_the_new(two):
    site = next(s for s in two.session.patch.sites if s.length == 5 and s.form == "call")
    call, nop = site.original, site.disabled
    seen = states(two.session, site.addr, call, SAFE)
    assert seen[-1] == call
    for state in seen[:-1]:
        assert first_insn(state, site.addr) == ("int3", "")  # every CPU that fetches here traps
    assert seen[0] == b"\xcc" + nop[1:]
    assert two.session.smp.poke.in_flight == {}
    back = states(two.session, site.addr, nop, SAFE)
    assert back[-1] == nop and all(s[0] == 0xCC for s in back[:-1])


def test_x86_naive_passes_through_instructions_that_are_neither(two):
    site = next(s for s in two.session.patch.sites if s.length == 5 and s.form == "call")
    call, nop = site.original, site.disabled
    seen = states(two.session, site.addr, call, NAIVE)
    assert len(seen) == sum(a != b for a, b in zip(call, nop, strict=True))  # one store per byte
    legit = {first_insn(call, site.addr), first_insn(nop, site.addr)}
    assert any(first_insn(s, site.addr) not in legit for s in seen[:-1])


def test_a_write_reaches_every_cpu_that_had_translated_the_code(two):
    two.run([Call("sched_run", (2,))])  # both CPUs translate sched_run with its sites NOPs
    two.session.enable("hk:sched:run:tick")
    fired = [e["cpu"] for e in two.run([Call("sched_run", (2,))]) if e["event"] == "fire"]
    assert sorted(fired) == [0, 0, 1, 1]


@pytest.mark.parametrize("arch", [a for a in OTHER_ARCHES if a in ("aarch64", "riscv64")])
def test_an_aligned_instruction_is_one_store(arch_kernel, arch):
    b = Booted(arch_kernel(arch).image, cpus=2)
    try:
        poke = b.session.smp.poke
        for site in b.session.patch.sites:
            if site.form == "cond" or site.addr % 4:
                continue
            before = poke.stores
            seen = states(b.session, site.addr, site.armed, SAFE)
            assert seen == [site.armed] and poke.stores == before + 1
    finally:
        b.session.close()
