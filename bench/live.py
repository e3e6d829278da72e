"""`make bench-live`: streaming to lttng-relayd (docs/live.md), each figure beside a baseline of the same run.

- a QEMU guest's events read in its shared RAM and streamed to a local relay daemon, against the same run written
  to a local CTF trace;
- the latency from a firing on the guest (its event's time, through the machine's clock correlation) to its line in
  babeltrace2's lttng-live output (the host's real time when the line is read);
- eight process targets streaming into one relay daemon at once, against one alone.

A real Debian lttng-relayd on loopback ports (tests/relayd_daemon.py's), babeltrace2 as the reader of truth: every
trace's events are counted by babeltrace2 (bench/qemu.py's BT2_COUNT), not by sdtgen. Nothing asserts a time.
"""

from __future__ import annotations

import io
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "tests") not in sys.path:
    sys.path.append(str(ROOT / "tests"))  # the relay daemon the tests start, and their live viewer

import qemu  # noqa: E402
from relayd_daemon import Lines, LiveViewer, relayd, wait_attached  # noqa: E402

TICK, EXIT = "hk:sched:run:tick", "hk:proc:exit:done"
RING = 8 << 20  # bytes a CPU of a process target: a run's records fit, none discarded


def _no_linger():
    """The end of a relay's trace without its LINGER live periods of beacons (a fixed pause for viewers still
    reading, not the time the packets take): what the throughput rows time is the packets' way."""
    import sdtgen.transport.relayd as relayd_sink

    relayd_sink.LINGER = 0


def build_process(work: Path) -> Path:
    """fixtures/process's kernel-proc: the fixture kernel on the hosted platform, the cheapest target."""
    out = work / "process"
    subprocess.run(["make", "-s", "-C", str(ROOT / "fixtures" / "process"), f"O={out}", f"SDTGEN={qemu.SDTGEN}"],
                   check=True, stdout=subprocess.DEVNULL)
    return out / "kernel-proc"


# The events of one name in a CTF trace, counted by babeltrace2's own Python bindings (Debian's python3-bt2): the
# reader's word on what reached the trace (a process's packets also carry the task events of its context).
BT2_NAMED = """
import bt2, sys
print(sum(1 for m in bt2.TraceCollectionMessageIterator(sys.argv[1])
          if type(m) is bt2._EventMessageConst and m.event.name == sys.argv[2]))
"""


def bt2_count(trace: Path, name: str = TICK) -> int:
    return int(subprocess.run(["/usr/bin/python3", "-c", BT2_NAMED, str(trace), name], capture_output=True,
                              text=True, check=True).stdout)


def stored(daemon, machine: str) -> Path:
    [trace] = daemon.traces(machine, "default")
    return trace


def qemu_streams(image: Path, work: Path, cpus: int, n: int, rounds: int = 3) -> dict:
    """sched_run(n) on every vCPU at once, its tick probe branch-armed, the packets read in the machine's shared RAM:
    into a local CTF trace, and (a boot of its own) to a local relay daemon alone, in ``rounds`` interleaved rounds;
    the best events a second of each from the command to the trace finished, the fewest events babeltrace2 read
    from any and the most the kernel lost."""
    out = {"expected": cpus * n}
    for how in ("local", "relayd") * rounds:
        got = qemu_stream(image, work, how, cpus, n)
        had = out.setdefault(how, got)
        out[how] = {"rate": max(had["rate"], got["rate"]), "events": min(had["events"], got["events"]),
                    "lost": max(had["lost"], got["lost"])}
    return out


def qemu_stream(image: Path, work: Path, how: str, cpus: int, n: int) -> dict:
    """One boot of qemu_streams: ``how`` "local" (a CTF directory) or "relayd" (a relay daemon alone)."""
    import shutil

    _no_linger()
    local = work / "local"
    shutil.rmtree(local, ignore_errors=True)
    shutil.rmtree(work / f"relayd-{how}", ignore_errors=True)
    with relayd(work / f"relayd-{how}") as daemon:
        output = {"trace": (str(local), "ctf")} if how == "local" else {"relayd": daemon.url, "machine": "bench-qemu"}
        s = qemu.session(image, quiet=True, cpus=cpus, arm="branch", timeout=600, buffer_size=qemu.RING * 8,
                         **output)  # as `sdtgen qemu -q --trace DIR` or `--relayd URL`
        took, lost = qemu.timed_ticks(s, n)
        events = bt2_count(local if how == "local" else stored(daemon, "bench-qemu"))
    return {"rate": cpus * n / took, "events": events, "lost": lost}


def live_latency(image: Path, work: Path, firings: int) -> list[float]:
    """``firings`` calls on a QEMU guest streaming to a relay daemon, one at a time at uneven intervals, while
    babeltrace2 reads it live (line-buffered, as at a terminal): each firing's latency in seconds, from its event's
    time (its clock cycles through the machine's correlation) to the host's real time when its line was read."""
    import shutil

    from sdtgen.trace.model import ticks_to_ns

    shutil.rmtree(work / "relayd-latency", ignore_errors=True)
    with relayd(work / "relayd-latency") as daemon:
        s = qemu.session(image, quiet=True, cpus=1, timeout=120, relayd=daemon.url, machine="bench-live")
        try:
            lines = Lines(LiveViewer(daemon.live_url("bench-live", "default"), "--clock-cycles", line_buffered=True))
            wait_attached(daemon, "bench-live", "default", lines)
            s.enable(EXIT)
            for k in range(firings):
                s.run("proc_exit", [k])
                time.sleep(0.05 + (k * 37 % 11) / 40)  # 50 to 300 ms, out of step with the live period
            m, hz = s.machine, s.target.booted.clock_hz
            s.drain()
            s.finish_trace()
        finally:
            s.close()
        lines.viewer.wait()
        lines.thread.join()
    got = [(int(line[1:line.index("]")]), at) for line, at in zip(lines.lines, lines.times, strict=False)
           if line and f" {EXIT}: " in line]
    assert len(got) == firings, f"babeltrace2 showed {len(got)} of {firings} firings"
    return [(at - (m.offset_ns + ticks_to_ns(cycles, hz))) / 1e9 for cycles, at in got]


def many_processes(kernel_proc: Path, work: Path, counts: tuple[int, ...], n: int) -> dict[int, dict]:
    """``k`` process targets (for each k of ``counts``) each streaming sched_run(n)'s ticks to one relay daemon at
    once, each session on its own thread: total events a second from the first call to the last trace finished,
    and the events babeltrace2 read from the relay daemon's traces."""
    import shutil

    from sdtgen.session.reporter import Reporter
    from sdtgen.session.starts import open_session

    _no_linger()
    out = {}
    for k in counts:
        shutil.rmtree(work / f"relayd-{k}", ignore_errors=True)
        with relayd(work / f"relayd-{k}") as daemon:
            names = [f"bench-proc-{i}" for i in range(k)]
            sessions = [open_session("process", str(kernel_proc), Reporter(quiet=True, out=io.StringIO()),
                                     arm="branch", timeout=600, relayd=daemon.url, machine=name,
                                     buffer_size=RING)
                        for name in names]
            go = threading.Barrier(k + 1)

            lost = [0] * k

            def fire(i: int, s, go=go, lost=lost) -> None:
                s.enable(TICK)
                go.wait()
                s.run("sched_run", [n], 0)
                s.finish_trace()
                lost[i] = sum(x.total for x in s.streams.last_lost().values())

            threads = [threading.Thread(target=fire, args=(i, s)) for i, s in enumerate(sessions)]
            try:
                for t in threads:
                    t.start()
                go.wait()
                t0 = time.perf_counter()
                for t in threads:
                    t.join()
                took = time.perf_counter() - t0
            finally:
                for s in sessions:
                    s.close()
            events = sum(bt2_count(stored(daemon, name)) for name in names)
        out[k] = {"rate": k * n / took, "events": events, "expected": k * n, "lost": sum(lost)}
    return out


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def median(values: list[float]) -> float:
    return statistics.median(values)
