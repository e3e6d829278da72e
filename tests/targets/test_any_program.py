"""A program sdtgen's fixtures know nothing of (tests/targets/anyprogram: a few probes in a C file of its own),
built through the Makefile fragment with the runtime, the hosted platform and its shipped main
(sdtgen/runtime/hosted/sdt_linux_main.c), and no main of its own: `sdtgen torture --target process` tortures it,
and started with the process target's flags on a FIFO pair it is traced by `sdtgen attach`, each CPU firing what
the same C fires natively, and babeltrace2 reading the trace back."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from helpers import SDTGEN, need_tool, run, sdtgen
from native import Call, build_native, run_native
from process_oracle import serve

from sdtgen.errors import SdtError
from sdtgen.layout import VALUES
from sdtgen.session.reporter import Reporter
from sdtgen.session.session import Session
from sdtgen.targets import open_target
from sdtgen.trace.ctf import TASK_EVENT

HERE = Path(__file__).resolve().parent / "anyprogram"
PROTOS = {"tiny_push": ("long", ["long"]), "tiny_pop": ("long", ["long"]), "tiny_sum": ("unsigned long",
                                                                                      ["unsigned long"])}
CALLS = [Call("tiny_push", (6,)), Call("tiny_pop", (0,)), Call("tiny_pop", (3,)), Call("tiny_sum", (5,))]
CPUS = 2
RESULT = {"long": "long", "unsigned long": "ulong"}  # --run SYMBOL:TYPE's names of the C result types


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("anyprogram")
    run(["make", "-C", str(HERE), f"O={out}", f"SDTGEN={SDTGEN}"])
    return out / "tiny"


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> list[dict]:
    """tiny.c built for this machine, every probe a function that prints its call (tools/native.py)."""
    out = tmp_path_factory.mktemp("anyprogram-native")
    include = run([SDTGEN, "include-dir"]).stdout.strip()
    return run_native(build_native(out, [HERE / "tiny.c"], PROTOS, include), CALLS)


def test_the_programs_main_is_the_shipped_weak_one(tiny):
    """What makes it a kernel sdtgen drives is sdt_linux_main.c, not code of the program's: nm sees main weak."""
    symbols = {ln.split()[-1]: ln.split()[-2] for ln in run(["nm", str(tiny)]).stdout.splitlines()}
    assert symbols["main"] == "W" and symbols["sdt_linux_main"] == "T"


def test_torture_on_the_process_target_tears_nothing(tiny):
    r = sdtgen("torture", tiny, "--target", "process", "--run", "tiny_sum", "--arg", "20", "--cpus", "2",
               "--toggles", "500", "--arm", "trap", "--json", "--timeout", "300")
    assert r.stderr == "" and r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert (s["protocol"], s["cpus"], s["toggles"]) == ("safe", 2, 500)
    assert (s["torn"], s["faults"], s["wrong"], s["leaked"]) == (0, 0, 0, 0)
    assert s["calls"] > 500 and s["firings"] > 0 and s["passed"]


def test_the_process_target_bounds_cpus_where_the_hosted_platform_does(tiny):
    """The program itself (its C, sdt_runtime.h's SDT_LINUX_MAX_CPUS) takes that many CPUs and refuses one more in
    one line; the process target refuses the same number before it starts anything."""
    bound = VALUES["SDT_LINUX_MAX_CPUS"]
    took = [json.loads(line) for line in run([str(tiny), "--cpus", str(bound), "list"]).stdout.splitlines()]
    assert [e["cpu"] for e in took if e["event"] == "cpu"] == list(range(bound))
    refused = run([str(tiny), "--cpus", str(bound + 1), "list"], check=False)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [f"tiny: --cpus {bound + 1} is not a number of CPUs from 1 to {bound} (the "
                                           "hosted platform's SDT_LINUX_MAX_CPUS)"]
    with pytest.raises(SdtError, match=f"--cpus {bound + 1} is not a number of CPUs from 1 to {bound}$"):
        Session(str(tiny), Reporter(out=io.StringIO()), lambda host: open_target("process", host, cpus=bound + 1))


def fired(events: list[dict], cpu: int) -> list[tuple[str, list]]:
    return [(e["probe"], e["args"]) for e in events if e.get("event") == "fire" and e["cpu"] == cpu]


BT2_EVENT = re.compile(r"\[\d+\] \(\+[^)]*\) \S+ (\S+): \{ cpu_id = (\d+), events = \d+ \}, "
                       r"\{ size = \d+, unreadable = 0, tid = (\d+) \}, \{ ?(.*?) ?\}")


def bt2_value(text: str):
    return text[1:-1] if text.startswith('"') else int(text)


@pytest.mark.parametrize("mode", ["trap", "branch"])
def test_attach_traces_it_and_every_cpu_fires_the_native_run(tiny, native, tmp_path, mode):
    babeltrace = need_tool("babeltrace2", "babeltrace2")
    proc = serve(tiny, tmp_path / "line", CPUS)
    try:
        runs = [w for c in CALLS for w in ("--run", f"{c.function}:{RESULT[PROTOS[c.function][0]]}",
                                            *[x for a in c.args for x in ("--arg", str(a))])]
        r = run([SDTGEN, "attach", str(tiny), "--serial", str(tmp_path / "line"), "--json", "--arm", mode,
                 "--enable", "tiny:::", "--trace", str(tmp_path / "trace"), *runs], check=False, timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    want = [(e["probe"], e["args"]) for e in native if "probe" in e]
    assert want and all(fired(events, cpu) == want for cpu in range(CPUS))
    returns = [e["return"] for e in native if "return" in e]
    assert [e["value"] for e in events if e["event"] == "return" and e["cpu"] == 0] == returns
    # babeltrace2, the reference CTF reader, reads the trace attach wrote: the same firings on each CPU.
    read = {cpu: [] for cpu in range(CPUS)}
    said: dict[int, int] = {}  # CPU -> the thread its last task event said
    for line in run([babeltrace, "--clock-cycles", str(tmp_path / "trace")]).stdout.splitlines():
        m = BT2_EVENT.fullmatch(line)
        assert m, line
        if m[1] == TASK_EVENT:  # the thread the firings after it ran in (docs/runtime.md, Task context)
            said[int(m[2])] = int(re.match(r"tid = (\d+),", m[4])[1])
        # every event's context says the thread its CPU's last task event said
        assert int(m[3]) == said[int(m[2])], line
        if m[1] == TASK_EVENT:
            continue
        args = [bt2_value(f.split(" = ", 1)[1]) for f in m[4].split(", ")] if m[4] else []
        read[int(m[2])].append((m[1], args))
    assert all(read[cpu] == want for cpu in range(CPUS)), read
