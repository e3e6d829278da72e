"""The issue's whole example, as a user runs it (docs/post-mortem.md, "A whole example"): a kernel boots with its own
flight recorder on (fixtures/qemu/flight.c: session "flight", every probe, overwrite, opened at boot with no host),
an engineer's `sdtgen qemu --session eng` traces the scheduler beside it with a predicate, a second host's `sdtgen
attach --session agg` on the kernel's second line (fixtures/qemu/second_line.c) aggregates beside both, the kernel
panics on every vCPU (fixtures/qemu/panic/panic.c), and `--post-mortem` shows what every CPU did last. Each session
is exact against the native run of the same C (tests/native_oracle.py): the engineer's stream and its post-mortem
trace its filter, the aggregation the native counts, the flight recorder's last events of each vCPU the native
run's last events of that vCPU. x86-64 (`make qemu`, SDTGEN_QEMU_ALL=1: i386 too). QEMU's virt boards (AArch64,
RISC-V) have one UART, so no second host: under `make qemu` the same sessions run there on the one line, the
engineer's opened on it as its host would and the host's own --session aggregating."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import threading
import time

import pytest
from helpers import SDTGEN
from native_oracle import Call
from post_mortem_read import bt2_rows
from qemu_helpers import ALL, Qemu
from session_pair import native
from whole_kernel import TWO_LINES, whole_kernel

ARCHES = TWO_LINES if ALL else ("x86_64",)
ONE_LINE = ("aarch64", "riscv64")  # under `make qemu`
CPUS = 4
TICKS = 1000  # each vCPU's sched_run before its panic: far more than the flight recorder's 4 KiB ring holds
STREAM = "hk:sched:run:tick /arg0 >= 2/"
AGGREGATE = "hk:sched:: { @n[probename] = count(); }; hk:mem:: { @n[probename] = count(); }"
# What the engineer, then the second host, type at their consoles (each `run` on every vCPU at once, or @0).
ENGINEER = [Call("sched_run", (5,)), Call("kmem_alloc", (100,))]
SECOND = [Call("sched_run", (3,)), Call("kmem_alloc", (1 << 20,))]


def stream_wants(probe: str, args: list) -> bool:
    return probe == "hk:sched:run:tick" and args[0] >= 2


class Console:
    """An sdtgen with -i --json whose console the test types at: its JSON events as they come."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.events: list[dict] = []
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._q.put(json.loads(line))
        self._q.put(None)

    def type(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def until(self, done, what: str, timeout: float = 120) -> list[dict]:
        """Events until ``done(events so far)``; fails saying ``what`` if the process ends first."""
        deadline = time.monotonic() + timeout
        while not done(self.events):
            try:
                e = self._q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {what} within {timeout} s: {self.events[-5:]}") from None
            if e is None:
                raise AssertionError(f"ended before {what}: {self.proc.stderr.read()[-3000:]}")
            self.events.append(e)
        return self.events

    def run(self, call: Call) -> None:
        """`run` on every vCPU, each returned."""
        before = self.returned(call.function)
        self.type(f"run {call.function} {' '.join(map(str, call.args))}")
        self.until(lambda _: self.returned(call.function) == before + CPUS, f"{call.function}'s returns")

    def returned(self, symbol: str) -> int:
        return sum(e["event"] == "return" and e["symbol"] == symbol for e in self.events)

    def end(self) -> int:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        return self.proc.returncode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def by_cpu(rows: list[dict]) -> dict[int, list[tuple[str, list]]]:
    """babeltrace2's events, each CPU's in order (the runtime's own sdt: events left out)."""
    out: dict[int, list] = {}
    for r in rows:
        if "name" in r and not r["name"].startswith("sdt:"):
            out.setdefault(r["cpu"], []).append((r["name"], list(r["fields"].values())))
    return out



@pytest.mark.parametrize("arch", ARCHES)
def test_the_flight_recorder_a_stream_and_an_aggregation_then_a_panic_each_exact(qemu_kernel, native_exe, arch,
                                                                                  tmp_path):
    image = str(whole_kernel(qemu_kernel, arch))
    second = f"tcp:127.0.0.1:{free_port()}"
    pm = tmp_path / "pm"
    engineer = Console([SDTGEN, "qemu", image, "--json", "--cpus", str(CPUS), "--session", "eng", "--buffer-size",
                        "65536", "--enable", STREAM, "--post-mortem", str(pm), "-i", "--",
                        "-serial", f"{second},server=on,wait=off"])
    host = None
    try:
        engineer.until(lambda ev: any(e["event"] == "patched" for e in ev), "the engineer's boot")
        host = Console([SDTGEN, "attach", "--serial", second, image, "--json", "--session", "agg", "--buffer-size",
                        "65536", "--aggregate", AGGREGATE, "-i"])
        host.type("stats")  # answered once its session is open and its programs enabled
        host.until(lambda ev: any(e["event"] == "stats" for e in ev), "the second host's stats")
        for call in ENGINEER:
            engineer.run(call)
        for call in SECOND:
            host.run(call)
        host.type("printa")
        [printed] = [e for e in host.until(lambda ev: any(e["event"] == "aggregations" for e in ev), "printa")
                     if e["event"] == "aggregations"]
        engineer.type("sessions")
        engineer.until(lambda ev: sum(e["event"] == "session" for e in ev) >= 4, "the sessions listing")
        engineer.type(f"run panic_after {TICKS} {CPUS}")
        engineer.until(lambda ev: sum(e["event"] == "post-mortem" for e in ev) >= 4, "the post-mortem")
        assert engineer.proc.wait(timeout=60) == 1
    finally:
        engineer.end()
        if host is not None:
            host.end()
    events = engineer.events
    listed = {e["name"]: e for e in events if e["event"] == "session"}
    assert sorted(listed) == ["agg", "default", "eng", "flight"] and listed["flight"]["policy"] == "overwrite"
    said = {e["session"]: e for e in events if e["event"] == "post-mortem"}

    streamed = by_cpu([{"name": e["probe"], "cpu": e["cpu"], "fields": dict(enumerate(e["args"]))}
                       for e in events if e["event"] == "fire"])
    check(native_exe, tmp_path / "pm", said, streamed, printed)


def check(native_exe, pm, said: dict, streamed: dict, printed: dict) -> None:
    """Each session against the native run: the engineer's (``streamed``, and its post-mortem trace), the
    aggregation's printout, the flight recorder's post-mortem trace (``said``: the post-mortem's events by session)."""
    assert sorted(said) == ["agg", "default", "eng", "flight"] and all(e["distrusted"] == 0 for e in said.values())
    assert sorted(said["flight"]["cpus"]) == [str(k) for k in range(CPUS)]  # what every CPU did last
    made = [*ENGINEER, *SECOND, Call("sched_run", (TICKS,))]  # panic_after: sched_run(TICKS) on each vCPU
    every = native(native_exe, made)
    # The engineer's session: its filter of the native run, what it streamed then what the post-mortem read.
    want = [f for f in every if stream_wants(*f)]
    shown = [f for f in native(native_exe, ENGINEER) if stream_wants(*f)]  # read after each of the engineer's runs
    salvaged = by_cpu(bt2_rows(pm.with_name("pm-eng")))
    assert sorted(salvaged) == list(range(CPUS))
    for cpu in range(CPUS):
        assert salvaged[cpu] == want, f"CPU {cpu}"
        assert streamed[cpu] == shown, f"CPU {cpu}"
    # The aggregation: the native counts of what both hosts ran while it was open, on every vCPU.
    counts: dict[str, int] = {}
    for probe, _ in native(native_exe, [*ENGINEER, *SECOND]):
        if probe.startswith(("hk:sched:", "hk:mem:")):
            counts[probe.rsplit(":", 1)[1]] = counts.get(probe.rsplit(":", 1)[1], 0) + CPUS
    assert printed["session"] == "agg"
    assert {r["keys"][0]: r["value"] for r in printed["aggregations"][0]["rows"]} == counts
    # The flight recorder: each vCPU's last events, the native run's last ones, up to the panic.
    flight = by_cpu(bt2_rows(pm.with_name("pm-flight")))
    assert sorted(flight) == list(range(CPUS))
    for cpu in range(CPUS):
        got = flight[cpu]
        assert 50 < len(got) < TICKS and got == every[-len(got):], f"CPU {cpu}: {len(got)} events"
        assert said["flight"]["cpus"][str(cpu)]["events"] == len(got)


@pytest.mark.skipif(not ALL, reason="the virt boards' one-line case runs under `make qemu` (SDTGEN_QEMU_ALL=1)")
@pytest.mark.parametrize("arch", ONE_LINE)
def test_on_a_board_with_one_line_the_same_sessions_each_exact(qemu_kernel, native_exe, arch, tmp_path):
    """The kernel's flight recorder from boot; the engineer's session (STREAM) opened on the one line as its host
    would open it; the host's own --session aggregating; the calls of both; the panic; the post-mortem."""
    from filtered_session import TABLES, FilteredSession
    from session_pair import RING, Firings

    from sdtgen.targets.base import Halted, OwnSession
    from sdtgen.transport.geometry import packet_size_for

    image = whole_kernel(qemu_kernel, arch)
    pm = tmp_path / "pm"
    q = Qemu(image, own=OwnSession("agg", RING, packet_size_for(RING), "drop", TABLES), cpus=CPUS,
             post_mortem=(str(pm), "ctf"))
    s = q.session
    try:
        firings = Firings(image)
        s.aggregate(AGGREGATE)
        eng = FilteredSession(s, "eng", STREAM)
        for call in [*ENGINEER, *SECOND]:
            s.run(call.function, list(call.args))
            if call in ENGINEER:
                eng.read(firings)
        s.printa()
        listed = sorted(x.name for x in s.sessions())
        with pytest.raises(Halted):
            s.run("panic_after", [TICKS, CPUS])
    finally:
        q.close()
    assert listed == ["agg", "default", "eng", "flight"]
    events = q.events()
    said = {e["session"]: e for e in events if e["event"] == "post-mortem"}
    [printed] = [e for e in events if e["event"] == "aggregations"]
    streamed: dict[int, list] = {}
    for e in sorted(eng.events, key=lambda e: (e.ts, e.cpu)):
        streamed.setdefault(e.cpu, []).append(firings(e.probe, e.args))
    check(native_exe, pm, said, streamed, printed)
