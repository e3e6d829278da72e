"""A recorder holds its CPU from cpu_area to cpu_release: in a preemptible kernel whose timer moves the task to
another CPU whenever the preemption count allows it (tests/runtime/preempt_harness.c: the runtime and gen's
recorders built as a kernel builds them, the timer ticking at the clock readings the runtime makes in the
middle of every event and at every packet it opens and closes), no event is finished in another CPU's packet
and no event of the task the CPU runs meanwhile is lost as nested: every firing of the C is in the streams,
once, in the order it fired, in branch mode, trap mode (sdt_trap's fire path) and through sdt_flush, with the
preemption count back to 0 after each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import SDTGEN, need_tool, run

from sdtgen.event_format import event_format
from sdtgen.probes import probe_key
from sdtgen.trace.packets import Decoder, split

HERE = Path(__file__).resolve().parent
CFLAGS = ["-O2", "-fPIE", "-fno-asynchronous-unwind-tables", "-fno-stack-protector", "-Wall", "-Wextra", "-Werror"]
PROBES = {"__dtrace_sdt_pm_task_step_two": ("pm:task:step:two", ("long", "long")),
          "__dtrace_sdt_pm_task_step_name": ("pm:task:step:name", ("const char *", "long")),
          "__dtrace_sdt_pm_other_task_hit": ("pm:other:task:hit", ("long",))}
NAMES = ["zero", "one", "a name of some length", "three"]
STEPS = 400


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    """preempt_probes.c partially linked, `sdtgen gen` on it, its stubs, recorders and table compiled with the
    runtime and linked with preempt_harness.c into a program for this machine."""
    gcc, ld = need_tool("gcc", "gcc"), need_tool("ld", "binutils")
    out = tmp_path_factory.mktemp("preempt")
    include = run([SDTGEN, "include-dir"]).stdout.strip()
    runtime = run([SDTGEN, "runtime-dir"]).stdout.strip()
    partial = run([SDTGEN, "linker-script", "partial", "--path"]).stdout.strip()
    run([gcc, *CFLAGS, f"-I{include}", "-c", "-o", str(out / "probes.o"), str(HERE / "preempt_probes.c")])
    run([ld, "-r", "-T", partial, "-o", str(out / "kernel.o"), str(out / "probes.o")])
    run([SDTGEN, "gen", str(out / "kernel.o"), "--stubs", str(out / "stubs.c"), "--table", str(out / "table.S")])
    objs = [out / "kernel.o"]
    for name, src, extra in (("stubs", out / "stubs.c", ["-ffreestanding"]), ("table", out / "table.S", []),
                             ("runtime", Path(runtime) / "sdt_runtime.c", ["-ffreestanding", f"-I{runtime}"]),
                             ("arch", Path(runtime) / "arch" / "sdt_x86_64.c", ["-ffreestanding", f"-I{runtime}"]),
                             ("harness", HERE / "preempt_harness.c", [])):
        objs.append(out / f"{name}.o")
        run([gcc, *CFLAGS, *extra, f"-I{include}", "-c", "-o", str(objs[-1]), str(src)])
    exe = out / "preempt_harness"
    run([gcc, "-pie", "-o", str(exe), *map(str, objs)])
    return exe


def fired(exe: Path, mode: str, tmp: Path) -> tuple[dict, list]:
    """The harness's counts, and every event of both CPUs' streams in the order the clock stamped them."""
    proc = run([str(exe), mode, str(STEPS), str(tmp)], timeout=120)
    stats = json.loads(proc.stdout)
    dec = Decoder([event_format(probe_key(sym), spec, types, 64) for sym, (spec, types) in PROBES.items()], 64)
    events = [e for cpu in (0, 1) for data in split((tmp / f"stream_{cpu}").read_bytes(), dec)
              for e in dec.events(data)[1]]
    return stats, sorted(events, key=lambda e: e.ts)


@pytest.mark.parametrize("mode", ["branch", "trap"])
def test_a_preempted_recorder_finishes_its_event_on_its_own_cpu(harness, tmp_path, mode):
    stats, events = fired(harness, mode, tmp_path)
    assert (stats["patched"], stats["armed"]) == (3, 3)
    # the pair was honoured: never an area released on another CPU than it was taken on, the count balanced
    assert (stats["foreign"], stats["unbalanced"], stats["preempt"]) == (0, 0, 0)
    # the timer came in the middle of events (the count deferred it) and moved the task, many times
    assert stats["migrations"] > STEPS // 4 and stats["deferred"] >= stats["migrations"]
    assert stats["discarded"] == [0, 0]  # no event of the other task was lost as nested
    task = [(e.probe, list(e.args)) for e in events if e.probe.startswith("pm:task:")]
    assert task == [x for i in range(STEPS) for x in (("pm:task:step:two", [i, 3 * i]),
                                                      ("pm:task:step:name", [NAMES[i & 3], i]))]
    other = [e.args[0] for e in events if e.probe == "pm:other:task:hit"]
    assert other == list(range(1, stats["others"] + 1)) and stats["others"] == stats["migrations"]
    assert {e.cpu for e in events if e.probe.startswith("pm:task:")} == {0, 1}
