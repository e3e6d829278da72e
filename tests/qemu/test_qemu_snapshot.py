"""Snapshots of a kernel's flight recorder on QEMU (docs/sessions.md, "Snapshots"): the kernel opens "flight"
(fixtures/qemu/panic/panic.c's flight_snapshot_open: the scheduler's probes, an overwriting ring of 8 packets of
1 KiB a CPU, a snapshot of 3 closed packets and the open one), every CPU runs the scheduler's loop far past what the
ring holds, and the snapshot is taken three ways: the kernel's panic path (sdt_snapshot, read by the post-mortem out
of the RAM), the host's `snapshot NAME` (--take-snapshot) and the kernel's own assert-path call, both read while it
runs (--snapshot, through the registry: QEMU's shared RAM, or the control core's `read` on the line when a host
attaches to a running kernel). Each CPU's snapshot, read by babeltrace2, is the native run's last events;
the snapshot stays as it was while recording goes on, until the next one."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURE, ROOT, SDTGEN, run
from post_mortem_read import bt2_rows, events_by_cpu, native_firings
from qemu_helpers import ALL, EVERY, listening_qemu

PANIC_SRC = ROOT / "fixtures" / "qemu" / "panic" / "panic.c"
# x86-64 and a weakly ordered machine (RISC-V); `make qemu` (SDTGEN_QEMU_ALL=1) all four
ARCHES = EVERY if ALL else ("x86_64", "riscv64")
CPUS, KEEP = 2, 3



@pytest.fixture(scope="module")
def panicking_on(qemu_kernel):
    """The fixture kernel with panic.c for an architecture (the post-mortem tests build the same ones)."""
    sources = " ".join([*(str(p) for p in sorted(FIXTURE.glob("*.c"))), str(PANIC_SRC)])
    return lambda arch: qemu_kernel(arch, KERNEL_SRCS=sources)


@pytest.fixture(scope="module")
def panicking(panicking_on):
    return panicking_on("x86_64")


def qemu(image, *args) -> tuple[int, list[dict]]:
    rc, events, _ = qemu_said(image, *args)
    return rc, events


def qemu_said(image, *args) -> tuple[int, list[dict], str]:
    proc = run([SDTGEN, "qemu", str(image), "--json", "-q", "--cpus", str(CPUS), *map(str, args)], check=False,
               timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def last_events(native: list, got: dict[int, list]) -> None:
    """Each CPU's snapshot is the native run's last events: more than KEEP + 1 packets of 1 KiB hold (an event is 16
    bytes at least, after a packet's 64-byte header) is not possible, fewer than KEEP - 1 whole ones hold (32 bytes
    at most for the tick's two arguments) is a snapshot that lost some."""
    assert sorted(got) == list(range(CPUS))
    for cpu, events in got.items():
        assert (KEEP - 1) * (1024 - 64) // 32 <= len(events) <= (KEEP + 1) * (1024 - 64) // 16, (cpu, len(events))
        assert events == native[-len(events):], cpu


@pytest.mark.parametrize("arch", ARCHES)
def test_the_panic_paths_snapshot_is_each_cpus_last_events(arch, panicking_on, native_exe, tmp_path):
    ticks = 1000
    rc, events = qemu(panicking_on(arch), "--run", "flight_snapshot_open:long", "--arg", CPUS, "--arg", KEEP,
                      "--cpu", "0", "--run", "panic_snapshot_after", "--arg", ticks, "--arg", CPUS,
                      "--post-mortem", tmp_path / "pm")
    assert rc == 1
    (opened,) = [e for e in events if e["event"] == "return" and e["symbol"] == "flight_snapshot_open"]
    assert opened["value"] == 1
    said = [e for e in events if e["event"] == "post-mortem" and e["snapshot"]]
    assert [(e["session"], e["trace"], e["distrusted"]) for e in said] == [
        ("flight", f"{tmp_path / 'pm'}-flight.snapshot", 0)]
    native = native_firings(native_exe, ticks)
    snap = events_by_cpu(bt2_rows(tmp_path / "pm-flight.snapshot"))
    last_events(native, snap)
    ring = events_by_cpu(bt2_rows(tmp_path / "pm-flight"))  # the ring, read as it stands: more, ending the same
    assert all(len(ring[cpu]) > len(snap[cpu]) and ring[cpu][-len(snap[cpu]):] == snap[cpu] for cpu in snap)


def test_a_snapshot_taken_by_the_host_or_the_kernel_is_read_while_recording_goes_on(panicking, native_exe,
                                                                                     tmp_path):
    first, later = 700, 300
    rc, events = qemu(panicking, "--run", "flight_snapshot_open:long", "--arg", CPUS, "--arg", KEEP, "--cpu", "0",
                      "--run", "sched_run", "--arg", first, "--take-snapshot", "flight",
                      "--run", "sched_run", "--arg", later, "--snapshot", "flight", tmp_path / "host",
                      "--run", "flight_snapshot:long", "--cpu", "1",
                      "--snapshot", "flight", tmp_path / "kernel.pftrace", "--snapshot", "flight", tmp_path / "kernel")
    assert rc == 0, events
    (taken,) = [e for e in events if e["event"] == "snapshot-taken"]
    assert (taken["session"], taken["kept"], taken["taken"]) == ("flight", CPUS * (KEEP + 1), 1)
    read = {e["trace"]: e for e in events if e["event"] == "snapshot"}
    assert all(e["distrusted"] == 0 and e["session"] == "flight" for e in read.values())
    # the host's snapshot, read after the kernel recorded more: still the last events of the first run
    last_events(native_firings(native_exe, first), events_by_cpu(bt2_rows(tmp_path / "host")))
    # the kernel's own call after the second run: its last events; Perfetto's trace holds as many a CPU
    (kept,) = [e for e in events if e["event"] == "return" and e["symbol"] == "flight_snapshot"]
    assert kept["value"] == CPUS * (KEEP + 1)
    kernel = events_by_cpu(bt2_rows(tmp_path / "kernel"))
    last_events(native_firings(native_exe, later), kernel)
    perfetto = read[str(tmp_path / "kernel.pftrace")]["cpus"]
    assert {int(c): v["events"] for c, v in perfetto.items()} == {c: len(v) for c, v in kernel.items()}


def test_a_snapshot_of_a_session_without_one_is_refused_in_one_line(panicking, tmp_path):
    rc, _, err = qemu_said(panicking, "--run", "flight_open:long", "--arg", CPUS, "--cpu", "0",
                           "--take-snapshot", "flight")
    assert rc != 0 and err.count("\n") == 1
    assert "error: the kernel cannot snapshot session 'flight': the session has no snapshot area" in err, err
    rc, _, err = qemu_said(panicking, "--run", "flight_open:long", "--arg", CPUS, "--cpu", "0",
                           "--snapshot", "flight", tmp_path / "none")
    assert rc != 0 and err.count("\n") == 1 and not (tmp_path / "none").exists()
    assert "the snapshot of session 'flight' cannot be read: the session has no snapshot area" in err, err


@pytest.fixture
def running(panicking, tmp_path):
    """The kernel booted by QEMU on its own, its rings attached by its boot, before any host attaches."""
    yield from listening_qemu(panicking, CPUS, f"ring 10000 2000 0 {128 << 20:x}\n", tmp_path)


def test_an_attached_host_reads_a_snapshot_through_the_line(running, panicking, native_exe, tmp_path):
    """`sdtgen attach` to the running kernel, which opens its flight recorder: no memory is shared, so the snapshot
    is read by the control core's `read`, found by the registry, checked as the post-mortem checks packets;
    babeltrace2 reads each CPU's last events of the native run."""
    ticks = 500
    proc = run([SDTGEN, "attach", "--serial", running, str(panicking), "--json", "-q", "--run",
                "flight_snapshot_open:long", "--arg", str(CPUS), "--arg", str(KEEP), "--cpu", "0", "--run", "sched_run",
                "--arg", str(ticks), "--take-snapshot", "flight", "--snapshot", "flight", str(tmp_path / "snap")],
               check=False, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    (said,) = [e for e in events if e["event"] == "snapshot"]
    assert said["distrusted"] == 0 and said["trace"] == str(tmp_path / "snap")
    last_events(native_firings(native_exe, ticks), events_by_cpu(bt2_rows(tmp_path / "snap")))
