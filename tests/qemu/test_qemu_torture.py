"""Probes armed and disarmed by CPU 0 while the other three vCPUs of QEMU's multi-threaded TCG call
the probed function over and over (`sdtgen torture --target qemu`: the kernel's own control core runs
it): with the runtime's protocol no call ever executes a torn instruction, faults or returns a wrong
value (x86's branch arming goes through the breakpoint protocol, RISC-V's is one store). The naive
protocol (bytes stored one at a time, the runtime built with -DSDT_NAIVE_PROTOCOL) is measured in
`make bench`, whatever it does."""

from __future__ import annotations

import json

import pytest
from helpers import sdtgen
from qemu_helpers import ALL, EVERY, TOGGLES

CASES = [(a, m) for a in EVERY for m in ("branch", "trap")] if ALL else [("riscv64", "branch"), ("x86_64", "branch")]


def torture(image, *options: str) -> tuple[int, dict]:
    r = sdtgen("torture", str(image), "--target", "qemu", "--cpus", "3", "--run", "sched_run", "--arg", "3",
               "--spec", "hk:sched::", "--timeout", str(TOGGLES * 2.0 + 60), "--json", *options)
    assert r.stderr == "", r.stderr
    return r.returncode, json.loads(r.stdout)


@pytest.mark.parametrize(("arch", "mode"), CASES)
def test_the_safe_protocol_never_tears_under_parallel_vcpus(qemu_kernel, arch, mode):
    code, t = torture(qemu_kernel(arch), "--toggles", str(TOGGLES), "--arm", mode)
    assert t["protocol"] == "safe" and t["toggles"] == TOGGLES and t["cpus"] == 3
    assert (t["torn"], t["faults"], t["wrong"]) == (0, 0, 0) and t["firings"] > 0
    assert t["calls"] > 10 * TOGGLES  # the other vCPUs really ran while the sites changed under them
    assert t["leaked"] == 0 and t["windows"] > TOGGLES // 2, "every disarmed window checked: nothing fired in it"
    assert code == 0 and t["passed"]


@pytest.mark.skipif(not ALL, reason="an extra build: make qemu")
def test_the_naive_build_reports_itself(qemu_kernel):
    _, t = torture(qemu_kernel("riscv64", naive=True), "--toggles", "4")
    assert t["protocol"] == "naive"


def test_a_torture_longer_than_its_timeout_stops_toggling_and_says_how_far_it_got(qemu_kernel):
    """--timeout bounds the toggling, as in the emulator: a million toggles in 10 s stop where the time ran out, and
    the summary says how many were made (timed out, so not passed), never "did not answer torture in time"."""
    asked = 1_000_000
    r = sdtgen("torture", str(qemu_kernel("riscv64")), "--target", "qemu", "--cpus", "2", "--run", "sched_run",
               "--arg", "3", "--spec", "hk:sched::", "--toggles", str(asked), "--timeout", "10", "--json")
    assert r.stderr == "", r.stderr
    t = json.loads(r.stdout)
    assert r.returncode == 1 and t["timed_out"] and not t["passed"]
    assert 0 < t["toggles"] < asked and t["asked"] == asked and t["toggles"] % 2 == 0
    assert (t["torn"], t["faults"], t["wrong"]) == (0, 0, 0) and t["calls"] > t["toggles"] and t["firings"] > 0


def test_qemu_arguments_come_after_dashes_or_each_as_qemu_arg_as_on_sdtgen_qemu(qemu_kernel):
    """torture takes QEMU's own arguments as `sdtgen qemu` does: --qemu-arg=ARG each, or all after --. Either way
    they reach QEMU's command line and its check: one sdtgen wires itself is one line, exit 2; one it does not,
    a torture that runs."""
    image = str(qemu_kernel("riscv64"))
    for given in (["--qemu-arg=-serial", "--qemu-arg=stdio"], ["--", "-serial", "stdio"]):
        r = sdtgen("torture", image, "--target", "qemu", "--cpus", "1", "--run", "sched_run", "--arg", "3",
                   "--toggles", "2", *given)
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
        assert "--qemu-arg -serial: sdtgen wires QEMU's serial ports" in r.stderr
    code, t = torture(image, "--toggles", "2", "--", "-m", "256M")
    assert code == 0 and t["toggles"] == 2 and t["passed"]


@pytest.mark.parametrize("arch", EVERY if ALL else ["riscv64"])
def test_a_second_session_keeps_the_sites_and_loses_no_firing_while_the_default_session_toggles(qemu_kernel,
                                                                                                native_exe, arch):
    """--keep: the host's own session holds hk:sched:run:tick armed and counts its firings in its tables while the
    control core's torture arms and disarms every hk:sched probe in the default session: nothing tears, no disarmed
    window fires, and the count is the native run's a call times every call made (the callers' and each batch's
    reference call). A disable that takes a kept site loses firings (checked by hand with a broken let_go)."""
    from native_oracle import Call
    from session_pair import native

    toggles = TOGGLES if ALL else 20
    code, t = torture(qemu_kernel(arch), "--toggles", str(toggles), "--keep", "hk:sched:run:tick")
    assert (t["torn"], t["faults"], t["wrong"], t["leaked"]) == (0, 0, 0, 0)
    each = sum(1 for probe, _ in native(native_exe, [Call("sched_run", (3,))]) if probe == "hk:sched:run:tick")
    assert t["kept_calls"] > t["calls"] > 10 * toggles
    assert t["kept"] == t["kept_calls"] * each and t["kept_dropped"] == 0
    assert code == 0 and t["passed"]
