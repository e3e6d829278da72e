"""Task context on the process target (docs/runtime.md, Task context; docs/aggregations.md): a program whose CPUs
are threads that say their own ids (gettid) and take names of their own (tests/targets/anyprogram/tasks.c) does
work on each CPU. A predicate on `tid`, `execname` or `curcontext` records exactly the native run's firings of
the threads it names; `@[tid] = count()` counts each thread's as the native run fires them; the Perfetto trace
holds each thread's events on its own thread track, named as the thread named itself; babeltrace2 reads each
event's tid from the CTF trace's event context. The truth: the program's own gettid and names, and the same C
run natively, never sdtgen's reading of itself."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from helpers import SDTGEN, need_module, run
from native import Call, build_native, run_native

from sdtgen.session.reporter import Reporter
from sdtgen.session.session import Session
from sdtgen.targets import open_target

HERE = Path(__file__).resolve().parent / "anyprogram"
CPUS = 3
WORK = (5, 9, 14)  # items each CPU's thread works through (distinct, so each count says whose it is)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "trace"))


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tasks")
    run(["make", "-C", str(HERE), f"O={out}", f"SDTGEN={SDTGEN}", "PROG=tasks"])
    return out / "tasks"


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> dict[int, list[tuple[str, list]]]:
    """tasks.c built for this machine, each probe a function printing its call: the firings of each CPU's work."""
    out = tmp_path_factory.mktemp("tasks-native")
    include = run([SDTGEN, "include-dir"]).stdout.strip()
    exe = build_native(out, [HERE / "tasks.c"], {"tk_work": ("long", ["long"])}, include)
    return {cpu: [(e["probe"], e["args"]) for e in run_native(exe, [Call("tk_work", (n,))]) if "probe" in e]
            for cpu, n in enumerate(WORK)}


class Run:
    """The program on the process target, each CPU's thread named tk-CPU, its id as the program says it."""

    def __init__(self, image: Path, mode: str = "branch", trace: tuple[str, str] | None = None) -> None:
        self.out = io.StringIO()
        self.s = Session(str(image), Reporter(as_json=True, out=self.out),
                         lambda host: open_target("process", host, cpus=CPUS, buffer_size=1 << 16, timeout=60),
                         arm=mode, trace=trace)
        self.tids = [self.s.run("tk_tid:long", [0], cpu=k) for k in range(CPUS)]
        for k in range(CPUS):
            assert self.s.run("tk_name:long", [k], cpu=k) == 0

    def work(self) -> None:
        for k, n in enumerate(WORK):
            self.s.run("tk_work:long", [n], cpu=k)
        self.s.finish_trace()

    def close(self) -> list[dict]:
        self.s.close()
        return [json.loads(line) for line in self.out.getvalue().splitlines()]


def fired(events: list[dict]) -> dict[int, list[tuple[str, list]]]:
    got: dict[int, list] = {cpu: [] for cpu in range(CPUS)}
    for e in events:
        if e.get("event") == "fire":
            got[e["cpu"]].append((e["probe"], e["args"]))
    return got


def only(native, cpus) -> dict[int, list]:
    return {cpu: native[cpu] if cpu in cpus else [] for cpu in range(CPUS)}


@pytest.mark.parametrize("mode", ["trap", "branch"])
def test_a_predicate_on_tid_records_exactly_that_threads_native_firings(tasks, native, mode):
    r = Run(tasks, mode)
    try:
        assert len(set(r.tids)) == CPUS
        assert r.s.enable(f"tk::: /tid == {r.tids[1]}/") > 0
        r.work()
    finally:
        events = r.close()
    assert fired(events) == only(native, {1})
    assert not [e for e in events if e.get("event") == "warning"], "no error: the hosted platform gives the hook"


@pytest.mark.parametrize(("predicate", "cpus"), [
    ('execname == "tk-2"', {2}),
    ('execname != "tk-2" && execname >= "tk-1"', {1}),
    ("curcontext == user", {0, 1, 2}),  # a thread of a process: on behalf of a task (SDT_CONTEXT_TASK)
    ("curcontext == kernel || curcontext == interrupt", set()),
    ('tid != 0 && execname == "tk-0"', {0}),
])
def test_predicates_on_the_task_name_and_context_record_the_threads_they_name(tasks, native, predicate, cpus):
    r = Run(tasks)
    try:
        r.s.enable(f"tk::: /{predicate}/")
        r.work()
    finally:
        events = r.close()
    assert fired(events) == only(native, cpus)


def test_an_aggregation_keyed_by_tid_counts_each_threads_native_firings(tasks, native):
    r = Run(tasks)
    try:
        assert r.s.aggregate("tk:work:item:done { @bytid[tid] = count(); @sum[tid, cpu] = sum(arg0) }") > 0
        r.work()
        r.s.printa()
    finally:
        events = r.close()
    (aggs,) = [e for e in events if e["event"] == "aggregations"][-1:]
    assert (aggs["dropped"], aggs["errors"], aggs["nested"]) == (0, 0, 0)
    rows = {a["name"]: a["rows"] for a in aggs["aggregations"]}
    count = {row["keys"][0]: row["value"] for row in rows["bytid"]}
    assert count == {r.tids[cpu]: len(native[cpu]) for cpu in range(CPUS)}
    sums = {tuple(row["keys"]): row["value"] for row in rows["sum"]}
    assert sums == {(r.tids[cpu], cpu): sum(a[0] for _, a in native[cpu]) for cpu in range(CPUS)}


def test_perfetto_shows_each_threads_events_on_its_own_named_thread_track(tasks, native, tmp_path):
    from test_perfetto import parse

    pb = need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
    path = tmp_path / "t.pftrace"
    r = Run(tasks, trace=(str(path), "perfetto"))
    try:
        r.s.enable("tk:::")
        r.work()
    finally:
        r.close()
    packets = parse(path)
    threads = {p.track_descriptor.uuid: p.track_descriptor.thread for p in packets
               if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread")}
    on: dict[int, list] = {}
    for p in packets:
        if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_INSTANT:
            te = p.track_event
            args = {a.name: a for a in te.debug_annotations}
            thread = threads[te.track_uuid]  # every event of a thread is on a thread track
            on.setdefault((thread.tid, thread.thread_name), []).append(
                (te.name, [args["arg0"].int_value, args["arg1"].int_value], args["cpu"].uint_value))
    assert on == {(r.tids[cpu], f"tk-{cpu}"): [(probe, a, cpu) for probe, a in native[cpu]] for cpu in range(CPUS)}
    assert len({t.pid for t in threads.values()}) == 1  # the kernel's tasks, one process


def test_babeltrace2_reads_each_events_tid_from_the_event_context(tasks, native, tmp_path):
    from test_ctf import read_bt2

    r = Run(tasks, trace=(str(tmp_path / "trace"), "ctf"))
    try:
        r.s.enable("tk:::")
        r.work()
    finally:
        r.close()
    rows = [x for x in read_bt2(tmp_path / "trace") if "name" in x]
    got: dict[int, list] = {cpu: [] for cpu in range(CPUS)}
    for x in rows:
        if x["name"] == "sdt:task":  # what the task events say, each event's context says too
            assert x["tid"] == x["fields"]["tid"] == r.tids[x["cpu"]]
            assert x["fields"]["procname"] == f"tk-{x['cpu']}"
            continue
        got[x["cpu"]].append((x["name"], [x["fields"]["arg0"], x["fields"]["arg1"]], x["tid"]))
    assert got == {cpu: [(p, a, r.tids[cpu]) for p, a in native[cpu]] for cpu in range(CPUS)}
