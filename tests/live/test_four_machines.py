"""Four kernels at once into one lttng-relayd (issue 35's "done when", docs/live.md and docs/trace.md "Machines"):
two QEMU guests of different architectures (x86-64 on 4 vCPUs, RISC-V), the fixture kernel as a Linux process, and
a kernel QEMU runs on its own that the host attaches to over its serial line. Each is a Session on a thread of its
own, streaming to one real relay daemon and writing its machine of one merged Perfetto file. babeltrace2's
lttng-live viewers, one a machine, print the events while the sessions run; the truth is the native run of the
fixture's C (every machine runs the same kernel source), and the order in which the host made the machines fire."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import need_module, need_tool
from native_oracle import Call
from qemu_helpers import listening_qemu
from relayd_daemon import Lines, LiveViewer, relayd, text_event, wait_attached
from session_pair import CALLS, Firings, native

from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session
from sdtgen.trace.model import UNBOUNDED
from sdtgen.trace.sink import open_merged_trace

X86, RISCV, PROC, ATTACHED = "guest-x86", "guest-rv", "proc", "attached"
NAMES = (X86, RISCV, PROC, ATTACHED)
CPUS = {X86: 4, RISCV: 2, PROC: 2, ATTACHED: 2}
# Which machine fires each tag, one after the other (the host waits for each call's return before the next): every
# machine fires between two firings of another, so one real time order across machines is the only right merge.
IN_TURN = [X86, RISCV, PROC, ATTACHED, RISCV, X86, ATTACHED, PROC, X86, RISCV]
TAG = 1000  # proc_exit(TAG + k): the firing of turn k, its exit code found in no other call
# How far a machine's clock may run from the host's real time since its correlation, a fraction of the time since
# (a clock's rate as its kernel says it: the x86 fixture measures its TSC's against the PIT at boot, seen within
# 0.002% of the host's; before its windows were bracketed by the polls' waits, it was seen 7% off with four guests
# booting on two cores, the merged order then wrong by a quarter of a second).
DRIFT = 0.002
EXIT = "hk:proc:exit:done"


def turn_call(k: int) -> Call:
    return Call("proc_exit", (TAG + k,))


class Machine:
    """A session on a thread of its own (every call on it made there), its firings, and its live viewer."""

    def __init__(self, name: str, image: Path, open_it) -> None:
        self.name, self.image = name, image
        self.thread = ThreadPoolExecutor(1, thread_name_prefix=name)
        self.opening = self.thread.submit(open_it)
        self.session = None
        self.lines: Lines | None = None
        self.turns: list[int] = []

    def opened(self):
        self.session = self.opening.result()
        bias = getattr(self.session.target, "bias", 0)  # a process's load address; a guest's image is linked there
        self.firings = Firings(self.image, bias)
        return self.session

    def do(self, action):
        return self.thread.submit(action, self.session)

    def close(self) -> None:
        """Its session closed, also one that opened while another machine's failed to."""
        if self.session is None and not self.opening.cancel() and self.opening.exception() is None:
            self.session = self.opening.result()
        if self.session is not None:
            self.thread.submit(self.session.close).result()
        self.thread.shutdown()


def all_of(futures) -> list:
    return [f.result() for f in futures]


def fire_everything(s) -> None:
    """Every probe enabled, the calls on each CPU in turn (the native run makes them once a CPU, in that order)."""
    s.enable(":::")
    for cpu in range(s.cpus):
        for c in CALLS:
            s.run(c.function, list(c.args), cpu)
    s.drain()


def finish(s) -> None:
    s.drain()
    s.finish_trace()


@pytest.fixture
def attached_line(qemu_kernel, tmp_path):
    """The fixture kernel booted by QEMU on its own (x86-64 on 2 vCPUs), its UART a TCP server, its boot giving its
    rings before any host attaches."""
    yield from listening_qemu(qemu_kernel("x86_64"), CPUS[ATTACHED], f"ring 10000 2000 0 {128 << 20:x}\n", tmp_path)


def offline(paths: list[Path]) -> list[tuple[str, int, str, list]]:
    """`babeltrace2 PATH...` (its muxer: every trace's events in one real time, by each clock's offset): (hostname,
    CPU, probe, fields) of each event, the task events left out."""
    proc = subprocess.run([need_tool("babeltrace2", "babeltrace2"), *map(str, paths)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    rows = [text_event(line) for line in proc.stdout.splitlines()]
    assert all(rows), [line for line, r in zip(proc.stdout.splitlines(), rows, strict=True) if not r][:3]
    return [r for r in rows if r[2] != "sdt:task"]


def perfetto_instants(path: Path) -> list[tuple[int, int, str, list]]:
    """The merged Perfetto file read with Perfetto's own protos: (machine_id, timestamp, probe, argument values) of
    each instant event."""
    pb = need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "trace"))
    from test_perfetto import parse

    out = []
    for p in parse(path):
        if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_INSTANT:
            args = [getattr(a, a.WhichOneof("value")) for a in p.track_event.debug_annotations
                    if a.name.startswith("arg")]
            out.append((p.machine_id, p.timestamp, p.track_event.name, args))
    return out


def test_four_kernels_stream_into_one_relay_daemon_shown_live_merged_in_real_time_and_grouped_by_machine(
        qemu_kernel, kernel_proc, native_exe, attached_line, tmp_path):
    """While the four sessions run, each machine's babeltrace2 lttng-live viewer prints every probe's firings of the
    calls made on each of its CPUs (the native run's, nothing lost) before the host goes on; then the machines fire
    in turn, and once the sessions ended: each viewer printed exactly its machine's native run; the relay daemon's
    four stored traces, given to babeltrace2 at once, hold every machine's events, and its muxer puts the turns in
    the order the host made them (each clock's offset from its correlation); and the one Perfetto file written by
    the four sessions at once holds each machine's same events under its machine_id."""
    from sdtgen.targets.serial import open_line

    images = {X86: qemu_kernel("x86_64"), RISCV: qemu_kernel("riscv64"), PROC: kernel_proc,
              ATTACHED: qemu_kernel("x86_64")}
    merged = open_merged_trace(tmp_path / "all.pftrace", "perfetto")
    line = open_line(attached_line, duplex=True)
    machines: dict[str, Machine] = {}
    with relayd(tmp_path) as daemon:
        def opener(name: str):
            kind, options = {X86: ("qemu", {}), RISCV: ("qemu", {}), PROC: ("process", {}),
                             ATTACHED: ("attach", {"line": line})}[name]
            if kind != "attach":
                options["cpus"] = CPUS[name]
            return lambda: open_session(kind, str(images[name]), Reporter(quiet=True, out=io.StringIO()),
                                        timeout=120, relayd=daemon.url, machine=name, trace=merged, **options)

        try:
            for name in NAMES:  # all four start at once, each on its own thread
                machines[name] = Machine(name, images[name], opener(name))
            for m in machines.values():
                m.opened()
            correlated = time.monotonic()  # each machine's clock correlated (when its session started) by now
            assert {n: m.session.cpus for n, m in machines.items()} == CPUS
            for m in machines.values():  # the viewers, started after the sessions exist and before any firing
                m.lines = Lines(LiveViewer(daemon.live_url(m.name, "default")))
            for m in machines.values():
                wait_attached(daemon, m.name, "default", m.lines)

            all_of([m.do(fire_everything) for m in machines.values()])  # the four at once
            once = native(native_exe, CALLS)
            assert len(once) > 20
            for name, m in machines.items():  # shown live: before the host makes another call
                want = [(cpu, p) for cpu in range(CPUS[name]) for p, _ in once]
                assert m.lines.wait_for(want) == want, f"{name}'s viewer did not show its events while it ran"

            for k, name in enumerate(IN_TURN):
                if k:  # past both correlations' uncertainty and drift: the real time order is the host's order
                    a, b = (machines[n].session.machine for n in (IN_TURN[k - 1], name))
                    assert UNBOUNDED not in (a.uncertainty_ns, b.uncertainty_ns), (a, b)
                    time.sleep(0.01 + 2 * (a.uncertainty_ns + b.uncertainty_ns) / 1e9
                               + 2 * DRIFT * (time.monotonic() - correlated))
                c = turn_call(k)
                machines[name].do(lambda s, c=c: s.run(c.function, list(c.args), 0)).result()
                machines[name].turns.append(k)
            all_of([m.do(finish) for m in machines.values()])
        finally:
            for m in machines.values():
                m.close()
            line.close()
        merged.finish()
        ended = {n: m.lines.viewer.wait() for n, m in machines.items()}
        stored = {n: daemon.traces(n, "default") for n in NAMES}

    whole: dict[str, list[tuple[int, tuple]]] = {}
    for name, m in machines.items():
        calls = [c for _ in range(CPUS[name]) for c in CALLS] + [turn_call(k) for k in m.turns]
        cpus = [cpu for cpu in range(CPUS[name]) for _ in once] + [0] * (len(native(native_exe, calls)) -
                                                                         CPUS[name] * len(once))
        whole[name] = list(zip(cpus, native(native_exe, calls), strict=True))
        code, _, errors = ended[name]
        assert code == 0, errors[-2000:]
        m.lines.thread.join()
        shown = [(cpu, m.firings(probe, fields)) for host, cpu, probe, fields in m.lines.parsed()]
        assert {host for host, *_ in m.lines.parsed()} == {name}
        assert shown == whole[name], f"{name}'s live events are not its native run's"

    assert all(len(paths) == 1 for paths in stored.values()), stored
    rows = offline([stored[n][0] for n in NAMES])
    for name, m in machines.items():
        assert [(cpu, m.firings(p, f)) for host, cpu, p, f in rows if host == name] == whole[name], name
    turns = [(host, f[0] - TAG) for host, _, p, f in rows if p == EXIT and f[0] >= TAG]
    assert turns == list(zip(IN_TURN, range(len(IN_TURN)), strict=True)), "the merged order is not the host's"

    ids = {m.session.machine.machine_id: n for n, m in machines.items()}
    assert len(ids) == 4
    instants = perfetto_instants(tmp_path / "all.pftrace")
    assert {i for i, *_ in instants} == set(ids)
    for machine_id, name in ids.items():
        m = machines[name]
        mine = sorted(((ts, probe, args) for i, ts, probe, args in instants if i == machine_id and probe != "sdt:task"),
                      key=lambda r: r[0])
        assert [m.firings(probe, args) for _, probe, args in mine] == [f for _, f in whole[name]], name
