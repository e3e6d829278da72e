"""Probes armed and disarmed by CPU 0 while the other three vCPUs of QEMU's multi-threaded TCG call
the probed function over and over: with the runtime's protocol no call ever executes a torn
instruction, faults or returns a wrong value (x86's branch arming goes through the breakpoint protocol,
RISC-V's is one store). The naive protocol (bytes stored one at a time, the runtime built with
-DSDT_NAIVE_PROTOCOL) is measured in `make bench`, whatever it does."""

from __future__ import annotations

import pytest
from qemu_helpers import ALL, EVERY, TOGGLES, Qemu

CASES = [(a, m) for a in EVERY for m in ("branch", "trap")] if ALL else [("riscv64", "branch"), ("x86_64", "branch")]


@pytest.mark.parametrize(("arch", "mode"), CASES)
def test_the_safe_protocol_never_tears_under_parallel_vcpus(qemu_kernel, arch, mode):
    q = Qemu(qemu_kernel(arch), cpus=4, arm=mode)
    try:
        t = q.session.torture("sched_run", [3], "hk:sched::", TOGGLES, timeout=TOGGLES * 2.0 + 60)
    finally:
        q.close()
    assert t.protocol == "safe" and t.toggles == TOGGLES
    assert (t.torn, t.faults, t.wrong) == (0, 0, 0) and t.passed
    assert t.calls > 10 * TOGGLES  # the other vCPUs really ran while the sites changed under them


@pytest.mark.skipif(not ALL, reason="an extra build: make qemu")
def test_the_naive_build_reports_itself(qemu_kernel):
    q = Qemu(qemu_kernel("riscv64", naive=True), cpus=2, arm="branch")
    try:
        assert q.session.torture("sched_run", [3], "hk:sched::", 4, timeout=60).protocol == "naive"
    finally:
        q.close()
