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
from helpers import build_c_kernel, need_tool
from wall_program import FIRED, LATE_NS, RATE_NS, build_wall

from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session

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

    def __init__(self, wall: Path, emulated: Path, traces: dict[str, tuple[str, str]]) -> None:
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


def test_babeltrace2_merges_the_machines_ctf_traces_in_the_real_time_order_they_fired(wall, emulated, tmp_path):
    """Two processes and an emulated AArch64 kernel, each traced to its own CTF directory; `babeltrace2 DIR...`
    prints their events in the order they fired across machines, each at the real time its machine says."""
    bt2 = need_tool("babeltrace2", "babeltrace2")
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
    proc = subprocess.run([bt2, "--clock-seconds", *map(str, dirs.values())], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    rows = []
    for line in proc.stdout.splitlines():
        if " sdt:task: " in line:
            continue
        m = BT2_LINE.match(line)
        assert m and m[4] in (FIRED, TICK), line
        rows.append((int(m[1]) * 1_000_000_000 + int(m[2]), m[3], int(m[5]), int(m[6]) if m[6] else None))
    check_times(fleet, rows)
