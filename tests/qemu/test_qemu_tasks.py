"""Task context on QEMU (fixtures/qemu/task.c, built with TASKS=1: CPU N's kernel thread is task 100 + N, named
kcpu/N, in the kernel's context): the fixture kernel on several vCPUs, every CPU making the same calls. A predicate
on `tid`, on `execname` and `curcontext`, records exactly the native run's firings on the CPU whose thread it
names, and `@[tid] = count()` counts each thread's firings as the native run makes them; Perfetto's protos read
each CPU's events on its thread's track (RISC-V, AArch64), babeltrace2 each event's tid in the CTF trace's event
context (x86-64, i386: 64- and 32-bit words)."""

from __future__ import annotations

import pytest
from helpers import need_module
from native_oracle import Call, build_fixture_native, run_native
from qemu_helpers import ALL, EVERY, qemu_json

CPUS = 3
BASE = 100  # task.c's FIXTURE_TASK_BASE
CALLS = [Call("sched_run", (6,)), Call("kmem_alloc", (100,)), Call("kmem_alloc", (70000,)), Call("proc_exit", (42,))]


@pytest.fixture(scope="module")
def firings(tmp_path_factory) -> list[tuple[str, list]]:
    exe = build_fixture_native(tmp_path_factory.mktemp("native"))
    return [(e["probe"], e["args"]) for e in run_native(exe, CALLS) if "probe" in e]


def runs() -> list[str]:
    return [w for c in CALLS for w in ("--run", f"{c.function}:long", *[f"--arg={a}" for a in c.args])]


@pytest.mark.parametrize("arch", EVERY if ALL else ("riscv64", "x86_64"))
def test_predicates_and_aggregations_on_the_task_select_each_cpus_thread(qemu_kernel, firings, arch, tmp_path):
    need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
    trace = tmp_path / ("trace" if arch in ("x86_64", "i386") else "t.pftrace")
    # in a session of the host's own beside the kernel's default one: a session restricted to tasks by its programs
    events = qemu_json(qemu_kernel(arch, TASKS="1"), "--cpus", CPUS, "--arm", "branch", "--session", "mine",
                       "--buffer-size", 1 << 16,
                       "--enable", f"hk:sched:run:tick /tid == {BASE + 1}/",
                       "--enable", 'hk:proc:exit:done /execname == "kcpu/2" && curcontext == kernel/',
                       "--enable", "hk:mem:alloc:done /curcontext != kernel/",
                       "--aggregate", "hk:mem:alloc:entry @bytid[tid] = count()",
                       "--trace", str(trace), *runs())
    fired: dict[int, list] = {cpu: [] for cpu in range(CPUS)}
    for e in events:
        if e["event"] == "fire":
            fired[e["cpu"]].append((e["probe"], e["args"]))
    ticks = [f for f in firings if f[0] == "hk:sched:run:tick"]
    exits = [f for f in firings if f[0] == "hk:proc:exit:done"]
    assert ticks and exits
    assert fired == {0: [], 1: ticks, 2: exits}
    [aggs] = [e for e in events if e["event"] == "aggregations"]
    assert (aggs["session"], aggs["dropped"], aggs["errors"], aggs["nested"]) == ("mine", 0, 0, 0)
    [bytid] = [a["rows"] for a in aggs["aggregations"] if a["name"] == "bytid"]
    entries = sum(1 for p, _ in firings if p == "hk:mem:alloc:entry")
    assert {row["keys"][0]: row["value"] for row in bytid} == {BASE + cpu: entries for cpu in range(CPUS)}
    if trace.suffix:
        assert_thread_tracks(trace, {1: len(ticks), 2: len(exits)})
    else:
        assert_event_context(trace, fired)


def assert_event_context(path, fired: dict[int, list]) -> None:
    """babeltrace2 reads each CPU's firings with its thread's id in the event context, as its task events say."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "trace"))
    from test_ctf import read_bt2

    got: dict[int, list] = {cpu: [] for cpu in range(CPUS)}
    for x in read_bt2(path):
        if "name" not in x:
            continue
        assert x["tid"] == BASE + x["cpu"]
        if x["name"] == "sdt:task":
            assert (x["fields"]["tid"], x["fields"]["procname"]) == (BASE + x["cpu"], f"kcpu/{x['cpu']}")
            continue
        got[x["cpu"]].append((x["name"], [x["fields"][f"arg{k}"] for k in range(len(x["fields"]))]))
    assert got == fired


def assert_thread_tracks(path, counts: dict[int, int]) -> None:
    """Perfetto's protos read each CPU's events on its thread's track, named as task.c names it."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "trace"))
    from test_perfetto import parse

    packets = parse(path)
    threads = {p.track_descriptor.uuid: p.track_descriptor.thread for p in packets
               if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread")}
    on: dict[tuple, int] = {}
    for p in packets:
        if p.HasField("track_event") and p.track_event.name:
            t = threads[p.track_event.track_uuid]
            on[(t.tid, t.thread_name)] = on.get((t.tid, t.thread_name), 0) + 1
    assert on == {(BASE + cpu, f"kcpu/{cpu}"): n for cpu, n in counts.items()}
