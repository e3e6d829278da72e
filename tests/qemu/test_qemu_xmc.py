"""QEMU's TCG keeps a translation a store raced (docs/runtime.md): fixtures/xmc, two M-mode harts and nothing of
sdtgen's, has one hart store an instruction and then a nop back over it, each store followed by fence.i on both
harts, while the other calls it. QEMU itself is the truth here: what the ISA promises (after its fence.i the other
hart runs the nop) fails on it, unless the store is made again after the handshake, which is what the patch
protocol's step 5 does for every kernel sdtgen patches."""

from __future__ import annotations

import subprocess

import pytest
from helpers import CROSS, ROOT, need_tool, run
from qemu_helpers import ALL

from sdtgen import arch as arches

XMC = ROOT / "fixtures" / "xmc"
ROUNDS = 4000  # xmc.c's: arm, disarm, a window of calls


@pytest.fixture(scope="module")
def xmc(tmp_path_factory):
    a = arches.by_name("riscv64")
    qemu = need_tool(a.qemu.binary, a.qemu.package)
    need_tool(*CROSS["riscv64"])
    out = tmp_path_factory.mktemp("xmc")
    run(["make", "-C", str(XMC), f"O={out}"])
    return qemu, out


def rounds(xmc, image: str) -> tuple[int, int, int, bool]:
    """(rounds, windows that ran the replaced instruction, calls that ran it, the site holds its nop at the end)."""
    qemu, out = xmc
    r = subprocess.run([qemu, "-machine", "virt", "-smp", "2", "-accel", "tcg,thread=multi", "-bios", "none",
                        "-display", "none", "-monitor", "none", "-serial", "stdio", "-kernel", str(out / image)],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    (line,) = [w for w in r.stdout.splitlines() if w.startswith("xmc ")]
    n, leaked, stale, site = (int(w) for w in line.split()[1:])
    return n, leaked, stale, site == 1


def test_a_store_made_again_after_the_handshake_leaves_no_hart_running_the_replaced_instruction(xmc):
    assert rounds(xmc, "xmc-again.elf") == (ROUNDS, 0, 0, True)


@pytest.mark.skipif(not ALL, reason="a race that shows only some runs: make qemu")
def test_qemu_runs_an_instruction_replaced_before_both_harts_ran_fence_i(xmc):
    """Seen under load: 6 to 27 windows of 4,000 (each running the addi on every call); on a quiet host a run of
    4,000 can see none, so up to five runs are made. None in all five: this QEMU may drop a translation a store
    raced, and the patch protocol's step 5 (docs/runtime.md) may no longer be needed with it."""
    seen = []
    for _ in range(5):
        n, leaked, stale, site = rounds(xmc, "xmc.elf")
        assert n == ROUNDS and site  # memory held the nop all along
        seen.append((leaked, stale))
        if leaked:
            break
    assert leaked > 0 and stale >= leaked, seen
