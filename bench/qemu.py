"""`make bench` measurements of the fixture kernel on QEMU (fixtures/qemu): firings a second end to end
(recorded in the guest, sent over the serial line, decoded on the host), the time from QEMU's start to
the first firing, and the torture test of both patch protocols under parallel vCPUs."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SDTGEN = str(Path(sys.executable).with_name("sdtgen"))
RING = 8 << 20  # bytes a vCPU: a run's records fit in half, so none is sent before the run ends


def build(work: Path, arch: str, naive: bool = False) -> Path:
    out = work / f"qemu-{arch}{'-naive' if naive else ''}"
    subprocess.run(["make", "-s", "-C", str(ROOT / "fixtures" / "qemu"), f"ARCH={arch}", f"O={out}",
                    f"SDTGEN={SDTGEN}", f"NAIVE={int(naive)}"], check=True, stdout=subprocess.DEVNULL)
    return out / "kernel.elf"


def session(image: Path, quiet: bool = False, **options):
    from sdtgen.session.reporter import Reporter
    from sdtgen.session.starts import open_session

    return open_session("qemu", str(image), Reporter(out=io.StringIO(), err=io.StringIO(), quiet=quiet), **options)


def firings_per_second(image: Path, cpus: int, arm: str, n: int) -> tuple[float, float]:
    """sched_run(n) on every vCPU at once with its tick probe armed, best of 3: firings a second in the
    guest (its records' timestamps, first to last, by its clock) and end to end (from the command sent to
    every record decoded on the host)."""
    s = session(image, cpus=cpus, arm=arm, timeout=600, buffer_size=RING, transport="serial")
    stamps: list[int] = []
    s.target.packets.consumers.append(lambda cpu, data: stamps.extend(e.ts for e in s.decoder.events(data)[1]))
    guest, host = 0.0, float("inf")
    try:
        s.enable("hk:sched:run:tick")
        for _ in range(3):
            stamps.clear()
            host = min(host, _timed(lambda: s.run("sched_run", [n])))
            guest = max(guest, (len(stamps) - 1) * s.target.booted.clock_hz / (max(stamps) - min(stamps)))
    finally:
        s.close()
    return guest, cpus * n / host


def build_tinyk(work: Path) -> Path:
    """examples/tinyk, a kernel of its own under OpenSBI that links the control core (-bios default)."""
    out = work / "tinyk"
    subprocess.run(["make", "-s", "-C", str(ROOT / "examples" / "tinyk"), f"O={out}", f"SDTGEN={SDTGEN}"],
                   check=True, stdout=subprocess.DEVNULL)
    return out / "tinyk.elf"


TINYK_ARGS = ("-bios", "default")


def first_firing(image: Path, probe: str = "hk:::boot", call: tuple[str, list[int]] = ("kmain", [1]),
                 qemu_args: tuple[str, ...] = ()) -> tuple[float, float]:
    """Seconds from starting QEMU to the kernel's hello, and to the first firing's packet on the host."""
    t0 = time.perf_counter()
    s = session(image, qemu_args=qemu_args, transport="serial")  # the packet's frame is seen as it arrives
    hello = time.perf_counter() - t0
    first: list[float] = []
    s.target.packets.consumers.append(lambda cpu, packet: first.append(time.perf_counter() - t0))
    try:
        s.enable(probe)
        s.run(*call)
    finally:
        s.close()
    return hello, first[0]


def commands_per_second(image: Path, spec: str, qemu_args: tuple[str, ...] = (), n: int = 200) -> float:
    """enable and disable round trips over the serial line, each answered before the next is sent: commands a
    second."""
    s = session(image, qemu_args=qemu_args, arm="branch")
    try:
        t = _timed(lambda: [s.enable(spec) + s.disable(spec) for _ in range(n)])
    finally:
        s.close()
    return 2 * n / t


def torture(image: Path, arm: str, toggles: int):
    s = session(image, cpus=4, arm=arm, timeout=toggles * 2.0 + 600)
    try:
        return s.torture("sched_run", [3], "hk:sched::", toggles)
    finally:
        s.close()


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# Counts a CTF trace's events and their first and last times with babeltrace2's own Python bindings (Debian's
# python3-bt2, for the system's python3): the reader's word on what reached the trace, not sdtgen's.
BT2_COUNT = """
import bt2, sys
n, first, last = 0, None, None
for m in bt2.TraceCollectionMessageIterator(sys.argv[1]):
    if type(m) is bt2._EventMessageConst:
        t = m.default_clock_snapshot.ns_from_origin
        n += 1
        first = t if first is None or t < first else first
        last = t if last is None or t > last else last
print(n, first, last)
"""


def timed_ticks(s, n: int) -> tuple[float, int]:
    """sched_run(n) on every vCPU of the session ``s`` (its tick probe enabled, its packets read in the machine's
    shared RAM), then its trace finished, and the session closed: the seconds from the command to the trace
    finished, and the events the kernel lost."""
    try:
        assert s.target.ram is not None, "the shared transport was not taken"
        s.enable("hk:sched:run:tick")
        t0 = time.perf_counter()
        s.run("sched_run", [n])
        s.finish_trace()
        return time.perf_counter() - t0, sum(x.total for x in s.streams.last_lost().values())
    finally:
        s.close()


def shared_stream(image: Path, trace: Path, cpus: int, n: int, qemu_args: tuple[str, ...] = ()) -> dict:
    """sched_run(n) on every vCPU at once, its tick probe branch-armed, the packets read in the machine's shared
    RAM into a CTF trace: events a second end to end (command sent to the last packet in the trace), and the
    guest's own firing rate (the trace's first to last event, as babeltrace2 reads them), the events babeltrace2
    counts and the lost ones the kernel counts."""
    s = session(image, quiet=True, cpus=cpus, arm="branch", timeout=600, buffer_size=RING * 8,
                trace=(str(trace), "ctf"), qemu_args=qemu_args)  # as `sdtgen qemu -q --trace DIR`
    took, lost = timed_ticks(s, n)
    out = subprocess.run(["/usr/bin/python3", "-c", BT2_COUNT, str(trace)], capture_output=True, text=True,
                         check=True).stdout.split()
    events, first, last = int(out[0]), int(out[1]), int(out[2])
    return {"events": events, "expected": cpus * n, "lost": lost, "host": cpus * n / took,
            "guest": (events - 1) / ((last - first) / 1e9)}


AGG_SCRIPT = "hk:sched:run:tick { @n = count(); @q = quantize(arg0) }"


def aggregated_run(image: Path, cpus: int, n: int) -> tuple[float, dict]:
    """sched_run(n) on every vCPU at once with count() and quantize(arg0) of its tick probe aggregated in the
    kernel (--arm branch): seconds from the command sent to the merged aggregations on the host, and those
    aggregations (as --json prints them)."""
    from sdtgen.dscript.printa import as_json

    s = session(image, cpus=cpus, arm="branch", timeout=1200)
    try:
        s.aggregate(AGG_SCRIPT)
        t0 = time.perf_counter()
        s.run("sched_run", [n])
        totals = s.snapshot()
        return time.perf_counter() - t0, as_json(totals)
    finally:
        s.close()


def quantize_expected(n: int, cpus: int) -> dict[tuple[int, int], int]:
    """quantize of 0 .. n-1 on each of ``cpus`` CPUs, by power-of-two bucket [lo, hi]: counted arithmetically."""
    out = {(0, 0): cpus}
    lo = 1
    while lo < n:
        hi = 2 * lo - 1
        out[(lo, hi)] = cpus * (min(hi, n - 1) - lo + 1)
        lo *= 2
    return out
