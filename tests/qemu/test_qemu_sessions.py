"""Two sessions at once on QEMU (x86-64 and AArch64): the fixture kernel's own session of every probe, opened first on
its line as its boot code would open a flight recorder, and the host's `sdtgen qemu --session` with a predicate on
one provider. Each holds exactly its own filter of the native run's firings, and the host's session closing at
power-off's eve leaves the kernel's recording, nothing lost from it (docs/sessions.md; tests/session_pair.py)."""

from __future__ import annotations

import pytest
from qemu_helpers import Qemu, listening_qemu
from session_pair import Firings, both_sessions, check_both, own

ARCHES = ("x86_64", "aarch64")



@pytest.mark.parametrize("arch", ARCHES)
def test_each_session_on_qemu_holds_its_own_filter_of_the_native_run(qemu_kernel, native_exe, arch):
    image = qemu_kernel(arch)
    q = Qemu(image, own=own())
    try:
        mine, theirs, lost = both_sessions(q.session, q.buffer, Firings(image))
    finally:
        q.close()
    check_both(native_exe, mine, theirs, lost)


@pytest.fixture
def flight_kernel(qemu_kernel, tmp_path):
    """The fixture kernel booted by QEMU on its own on 3 vCPUs, its UART a TCP server, its boot commands opening a
    flight recorder of every probe (`overwrite`) before any host attaches, as a kernel opens its own at boot."""
    yield from listening_qemu(qemu_kernel("x86_64"), FLIGHT_CPUS, f"ring 10000 2000 0 {128 << 20:x}\n"
                              "session open flight 10000 1000 1\n@flight enable branch :::\n", tmp_path)


FLIGHT_CPUS = 3


def test_attach_traces_its_own_session_beside_the_kernels_flight_recorder_and_closes_it_on_leaving(
        flight_kernel, qemu_kernel, native_exe, tmp_path):
    """`sdtgen attach --session mine` with a predicate, on every vCPU at once: its firings are the native run's that
    pass the predicate, on each vCPU; `--sessions` lists the kernel's flight recorder beside it; its trace opens in
    babeltrace2 saying its session. Once it left, `sdtgen sessions` lists the flight recorder alone, and the flight
    recorder holds every probe's firings of each vCPU, nothing lost."""
    import io
    import json
    import sys
    from pathlib import Path

    from helpers import SDTGEN, run
    from native_oracle import Call
    from session_pair import HOST_SPEC, Firings, KernelSession, host_wants, native

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "trace"))
    from test_ctf import read_bt2

    image = qemu_kernel("x86_64")
    proc = run([SDTGEN, "attach", "--serial", flight_kernel, str(image), "--json", "--session", "mine",
                "--buffer-size", "65536", "--enable", HOST_SPEC, "--run", "sched_run", "--arg", "5", "--sessions",
                "--trace", str(tmp_path / "trace")], check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    want = [f for f in native(native_exe, [Call("sched_run", (5,))]) if host_wants(*f)]
    firings = Firings(image)
    for cpu in range(FLIGHT_CPUS):
        assert [firings(e["probe"], e["args"]) for e in events if e["event"] == "fire" and e["cpu"] == cpu] == want
    listed = {e["name"]: e for e in events if e["event"] == "session"}
    assert sorted(listed) == ["default", "flight", "mine"] and listed["flight"]["policy"] == "overwrite"
    read = read_bt2(tmp_path / "trace")
    assert read[0]["trace"]["session"] == "mine" and len(read) - 1 == FLIGHT_CPUS * len(want)

    after = run([SDTGEN, "sessions", str(image), "--serial", flight_kernel, "--json"], timeout=120)
    assert [e["name"] for e in map(json.loads, after.stdout.splitlines()) if e["event"] == "session"] == [
        "default", "flight"]

    from sdtgen.session.reporter import Reporter
    from sdtgen.session.starts import open_session
    from sdtgen.targets.serial import open_line

    line = open_line(flight_kernel, duplex=True)
    try:
        s = open_session("attach", str(image), Reporter(as_json=True, out=io.StringIO()), line=line)
        try:
            flight = KernelSession(s, "flight", None)  # the kernel's own, opened at boot: read by name
            flight.read(firings)
            lost = flight.lost()
        finally:
            s.close()
    finally:
        line.close()
    every = native(native_exe, [Call("sched_run", (5,))])
    for cpu in range(FLIGHT_CPUS):
        assert [firings(e.probe, e.args) for e in sorted(flight.events, key=lambda e: e.ts) if e.cpu == cpu] == every
    assert lost == [(0, 0)] * FLIGHT_CPUS
