"""Several machines' traces in one real time (docs/trace.md, "Machines"): each trace of a session given a machine
name says the machine (CTF's env hostname and machine_id, Perfetto's machine_id) and where its clock stands against
the host's real time, so a reader merging them puts every event where it happened. The truth is the machines' own:
the wall program's CLOCK_REALTIME reading before each firing, the host's clock read around an emulated call, and
the order the test made them fire in."""

from __future__ import annotations

import io
import re
import subprocess
import time
from pathlib import Path

import pytest
from helpers import build_c_kernel, need_module, need_tool
from wall_program import FIRED, LATE_NS, RATE_NS, build_wall

from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session
from sdtgen.trace.sink import open_merged_trace

EMULATED = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(em);
SDT_PROBE_DEFINE1(em, , , tick, "long");
long kmain(long v) { SDT_PROBE1(em, , , tick, v); return v; }
"""
TICK = "em:::tick"
# Which machine fires each tag, in turn: every machine fires between two firings of another.
ORDER = ["proc-a", "emu", "proc-b", "proc-a", "proc-b", "emu", "proc-a"]
BT2_LINE = re.compile(r"^\[(\d+)\.(\d{9})\] \(\S+\) (\S+) (\S+): .*\{ arg0 = (\d+)(?:, arg1 = (\d+))? \}$")


@pytest.fixture(scope="module")
def wall(tmp_path_factory) -> Path:
    return build_wall(tmp_path_factory.mktemp("wall"))


@pytest.fixture(scope="module")
def emulated(tmp_path_factory) -> Path:
    """An AArch64 kernel: another architecture, another clock (cntvct_el0, 62.5 MHz) than the process's."""
    return build_c_kernel(tmp_path_factory.mktemp("emu"), "aarch64", EMULATED, "em")


class Fleet:
    """The three machines, each its own session writing its own trace (``fmt`` to ``paths[name]``), and what the
    host saw of each firing: (tag, machine, its real time before the call, after it)."""

    def __init__(self, wall: Path, emulated: Path, traces: dict) -> None:
        self.sessions = {}
        try:
            for name in ("proc-a", "proc-b"):
                self.sessions[name] = open_session("process", str(wall), Reporter(quiet=True, out=io.StringIO()),
                                                   machine=name, timeout=120, trace=traces.get(name))
                self.sessions[name].enable(FIRED)
            self.sessions["emu"] = open_session("emulator", str(emulated), Reporter(quiet=True, out=io.StringIO()),
                                                machine="emu", trace=traces.get("emu"))
            self.sessions["emu"].enable(TICK)
        except BaseException:
            self.close()
            raise
        self.calls: list[tuple[int, str, int, int]] = []

    def fire(self) -> None:
        for tag, name in enumerate(ORDER):
            before = time.time_ns()
            self.sessions[name].run("kmain" if name == "emu" else "wall_fire", [tag])
            self.calls.append((tag, name, before, time.time_ns()))

    def finish(self) -> None:
        for s in self.sessions.values():
            s.finish_trace()

    def close(self) -> None:
        for s in self.sessions.values():
            s.close()

    def machine(self, name: str):
        return self.sessions[name].machine


def check_times(fleet: Fleet, rows: list[tuple[int, str, int, int | None]]) -> None:
    """``rows`` (a reader's real time in ns, machine, tag, the program's own real time or None) are the firings in
    the order they were made, each where its machine's own record puts it."""
    assert [(name, tag) for _, name, tag, _ in rows] == [(name, tag) for tag, name, _, _ in fleet.calls]
    for (at, name, tag, said), (_, _, before, after) in zip(rows, fleet.calls, strict=True):
        u = fleet.machine(name).uncertainty_ns
        if said is not None:  # the program read the real time just before it fired
            assert -u - RATE_NS <= at - said <= u + LATE_NS, (name, tag, at - said, u)
        else:  # the emulator fired inside the call
            assert before - u - RATE_NS <= at <= after + u + RATE_NS, (name, tag, before, at, after)


def babeltrace2(*paths: Path) -> list[tuple[int, str, int, int | None]]:
    """The firings `babeltrace2 --clock-seconds PATH...` prints (its muxer's order): (real time in ns, the trace's
    hostname, arg0, arg1 or None)."""
    bt2 = need_tool("babeltrace2", "babeltrace2")
    proc = subprocess.run([bt2, "--clock-seconds", *map(str, paths)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    rows = []
    for line in proc.stdout.splitlines():
        if " sdt:task: " in line:
            continue
        m = BT2_LINE.match(line)
        assert m and m[4] in (FIRED, TICK), line
        rows.append((int(m[1]) * 1_000_000_000 + int(m[2]), m[3], int(m[5]), int(m[6]) if m[6] else None))
    return rows


def test_babeltrace2_merges_the_machines_ctf_traces_in_the_real_time_order_they_fired(wall, emulated, tmp_path):
    """Two processes and an emulated AArch64 kernel, each traced to its own CTF directory; `babeltrace2 DIR...`
    prints their events in the order they fired across machines, each at the real time its machine says."""
    dirs = {name: tmp_path / name for name in ("proc-a", "proc-b", "emu")}
    fleet = Fleet(wall, emulated, {name: (str(d), "ctf") for name, d in dirs.items()})
    try:
        fleet.fire()
        fleet.finish()
    finally:
        fleet.close()
    for name, d in dirs.items():
        m = fleet.machine(name)
        text = (d / "metadata").read_text()
        assert (f'\thostname = "{name}";\n\tmachine_id = {m.machine_id};\n'
                f"\tclock_offset_uncertainty_ns = {m.uncertainty_ns};\n") in text
    check_times(fleet, babeltrace2(*dirs.values()))


def merged_fleet(wall: Path, emulated: Path, path: Path, fmt: str) -> Fleet:
    """The three machines fired in turn, all traced into one merged output at ``path``."""
    merged = open_merged_trace(path, fmt)
    try:
        fleet = Fleet(wall, emulated, dict.fromkeys(("proc-a", "proc-b", "emu"), merged))
        try:
            fleet.fire()
            fleet.finish()
        finally:
            fleet.close()
    except BaseException:
        merged.abort()
        raise
    merged.finish()
    return fleet


def test_one_perfetto_file_holds_every_machine_its_tracks_grouped_and_its_clock_paired_with_real_time(
        wall, emulated, tmp_path):
    """Read with Perfetto's own protos: every packet of a machine carries its machine_id on a sequence of its own;
    its tracks hang under a process track named after it, their uuids its own; its ClockSnapshot pairs its kernel
    clock with BUILTIN_CLOCK_REALTIME; and its events, put in real time by that snapshot, are the firings in the
    order they were made, each where the machine's own record says."""
    pb = need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
    from test_perfetto import parse

    path = tmp_path / "all.pftrace"
    fleet = merged_fleet(wall, emulated, path, "perfetto")
    packets = parse(path)
    ids = {fleet.machine(n).machine_id: n for n in ORDER}
    assert len(ids) == 3 and all(p.machine_id in ids for p in packets)
    seqs: dict[str, set[int]] = {}
    for p in packets:
        seqs.setdefault(ids[p.machine_id], set()).add(p.trusted_packet_sequence_id)
    assert all(len(s) == 1 for s in seqs.values()) and len(set.union(*seqs.values())) == 3, seqs
    snapshots, processes, parents, owners = {}, {}, {}, {}
    for p in packets:
        name = ids[p.machine_id]
        if p.HasField("clock_snapshot"):
            clocks = {c.clock_id: c.timestamp for c in p.clock_snapshot.clocks}
            assert set(clocks) == {64, pb.BUILTIN_CLOCK_REALTIME}
            assert p.clock_snapshot.primary_trace_clock == pb.BUILTIN_CLOCK_REALTIME
            assert clocks[pb.BUILTIN_CLOCK_REALTIME] - clocks[64] == fleet.machine(name).offset_ns
            snapshots.setdefault(name, clocks)
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            assert owners.setdefault(d.uuid, name) == name  # no uuid shared between machines
            if d.HasField("process"):
                processes[name] = (d.uuid, d.process.process_name)
            else:
                parents[d.uuid] = d.parent_uuid
    assert {n: pname for n, (_, pname) in processes.items()} == {n: n for n in ORDER}
    rows = []
    for p in packets:
        if not p.HasField("track_event") or p.track_event.type != pb.TrackEvent.TYPE_INSTANT:
            continue
        name = ids[p.machine_id]
        assert owners[p.track_event.track_uuid] == name
        assert parents[p.track_event.track_uuid] == processes[name][0]  # under the machine's process track
        snap = snapshots[name]
        at = snap[pb.BUILTIN_CLOCK_REALTIME] + p.timestamp - snap[64]
        args = {a.name: a.int_value for a in p.track_event.debug_annotations}
        assert p.track_event.name == (TICK if name == "emu" else FIRED)
        rows.append((at, name, args["arg0"], args.get("arg1")))
    check_times(fleet, sorted(rows))


def test_a_merged_ctf_directory_holds_a_trace_a_machine_that_babeltrace2_reads_as_one(wall, emulated, tmp_path):
    fleet = merged_fleet(wall, emulated, tmp_path / "all", "ctf")
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == sorted(set(ORDER))
    check_times(fleet, babeltrace2(tmp_path / "all"))


def test_a_merged_chrome_file_is_a_process_a_machine_its_times_in_the_hosts_real_time(wall, emulated, tmp_path):
    """Read by Python's JSON parser: each machine's process named after it, its events' ts microseconds of real time
    from the base the document says."""
    import json

    path = tmp_path / "all.json"
    fleet = merged_fleet(wall, emulated, path, "chrome")
    doc = json.loads(path.read_text())
    names = {e["pid"]: e["args"]["name"].split(" ")[0] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert sorted(names.values()) == sorted(set(ORDER)) and len(names) == 3
    other = doc["otherData"]
    assert {m["machine"]["name"]: int(pid) for pid, m in other["machines"].items()} == {n: p for p, n in names.items()}
    base = other["realtime_base_ns"]
    rows = sorted((base + round(e["ts"] * 1000), names[e["pid"]], e["args"]["arg0"], e["args"].get("arg1"))
                  for e in doc["traceEvents"] if e["ph"] == "i")
    check_times(fleet, rows)


def test_machines_writing_one_perfetto_file_at_once_from_their_own_threads_lose_nothing(wall, tmp_path):
    """Two processes, each session on a thread of its own, fire at once into one merged file: each machine's
    firings are all there, in the order its thread made them, on its own sequence."""
    import threading

    pb = need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
    from test_perfetto import parse

    calls = 300
    path = tmp_path / "both.pftrace"
    merged = open_merged_trace(path, "perfetto")
    sessions = [open_session("process", str(wall), Reporter(quiet=True, out=io.StringIO()), machine=name, timeout=120,
                             trace=merged) for name in ("left", "right")]
    failed: list[BaseException] = []

    def fire(s) -> None:
        try:
            s.enable(FIRED)
            for tag in range(calls):
                s.run("wall_fire", [tag])
            s.finish_trace()
        except BaseException as e:
            failed.append(e)

    threads = [threading.Thread(target=fire, args=(s,)) for s in sessions]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in sessions:
            s.close()
    assert failed == []
    merged.finish()
    ids = {s.machine.machine_id: s.machine.name for s in sessions}
    tags: dict[str, list[int]] = {"left": [], "right": []}
    for p in parse(path):
        if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_INSTANT:
            tags[ids[p.machine_id]].append(next(a.int_value for a in p.track_event.debug_annotations
                                                if a.name == "arg0"))
    assert tags == {"left": list(range(calls)), "right": list(range(calls))}


def test_a_single_machines_perfetto_file_says_its_machine_and_clock_too(wall, tmp_path):
    pb = need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
    from test_perfetto import parse

    path = tmp_path / "one.pftrace"
    s = open_session("process", str(wall), Reporter(quiet=True, out=io.StringIO()), machine="solo", timeout=120,
                     trace=(str(path), "perfetto"))
    try:
        s.enable(FIRED)
        s.run("wall_fire", [7])
        s.finish_trace()
    finally:
        s.close()
    packets = parse(path)
    assert {p.machine_id for p in packets} == {s.machine.machine_id}
    [snap] = [p.clock_snapshot for p in packets if p.HasField("clock_snapshot")]
    clocks = {c.clock_id: c.timestamp for c in snap.clocks}
    assert clocks[pb.BUILTIN_CLOCK_REALTIME] - clocks[64] == s.machine.offset_ns
    assert [p.track_descriptor.process.process_name for p in packets
            if p.HasField("track_descriptor") and p.track_descriptor.HasField("process")] == ["solo"]


@pytest.mark.parametrize("fmt", ["perfetto", "chrome", "ctf"])
def test_a_merged_trace_refuses_a_second_machine_of_the_same_machine_id(fmt, tmp_path):
    """Two names of one CRC-32 would be one machine_id (and one set of track uuids): the second is refused in one
    line, the first's part kept."""
    import zlib

    from sdtgen.errors import SdtError
    from sdtgen.trace.model import Machine, TraceMeta, machine_id

    assert zlib.crc32(b"plumless") == zlib.crc32(b"buckeroo")
    if fmt == "perfetto":
        need_module("perfetto", "perfetto")
    merged = open_merged_trace(str(tmp_path / {"perfetto": "m.pftrace", "chrome": "m.json", "ctf": "m"}[fmt]), fmt)
    try:
        def meta(name: str) -> TraceMeta:
            return TraceMeta("x86_64", "tsc", 10**9, 1, (), machine=Machine(name, machine_id(name), 0, 0))

        merged.machine(meta("plumless"), 64, True)
        with pytest.raises(SdtError, match="machines 'plumless' and 'buckeroo' have the same machine id"):
            merged.machine(meta("buckeroo"), 64, True)
    finally:
        merged.abort()
