"""The fixture kernel as a Linux process (fixtures/process's kernel-proc) against its C run natively (tools/native.py):
the calls, their --run words, the native firings, and what sdtgen's JSON and babeltrace2 (reading its CTF trace) say
fired, in one shape to compare: the tests of `sdtgen process` and of fleets of such machines."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from helpers import need_tool, run
from native_oracle import PROTOTYPES, Call, run_native

# Calls whose firings on one CPU do not depend on another's (kmain and kmem_alloc share an allocator).
CALLS = [Call("sched_run", (5,)), Call("sched_switch", (7, 8, 3, 1, 5000, 0x40)), Call("vfs_lookup_id", (3,)),
         Call("proc_exec", (5,))]
POINTER = "hk:lib:"  # its probes' struct pointers: each build places its data apart, so they are left out
MASK = (1 << 64) - 1  # the native harness prints wide integers unsigned


def runs(calls: list[Call]) -> list[str]:
    """The --run words of ``calls``, each read as its C prototype returns."""
    return [w for c in calls for w in ("--run", f"{c.function}:{PROTOTYPES[c.function][0]}",
                                        *[x for a in c.args for x in ("--arg", str(a))])]


ACTIONS = ["--enable", "hk:::", *runs(CALLS)]  # every probe the calls fire, then the calls


def firing(probe: str, args: list) -> tuple[str, list]:
    return probe, [a & MASK if isinstance(a, int) else a for a in args]


def native(native_exe: Path, calls: list[Call] = CALLS) -> tuple[list, list, int]:
    """The native run of ``calls``: its firings (but the pointer ones) and return values, in order, and how many fired
    in all."""
    ran = run_native(native_exe, calls)
    return ([firing(e["probe"], e["args"]) for e in ran if "probe" in e and not e["probe"].startswith(POINTER)],
            [e["return"] for e in ran if "return" in e], sum("probe" in e for e in ran))


def fired(events: list[dict], cpu: int, machine: str | None = None) -> list[tuple[str, list]]:
    """The firings (but the pointer ones) ``cpu`` recorded, of ``machine``'s when given, in sdtgen's JSON events."""
    return [firing(e["probe"], e["args"]) for e in events if e.get("machine") == machine and e["event"] == "fire"
            and e["cpu"] == cpu and not e["probe"].startswith(POINTER)]


BT2_EVENT = re.compile(r"\[\d+\] \(\+[^)]*\) \S+ (\S+): \{ cpu_id = (\d+), events = \d+ \}, \{[^}]*\}, \{ ?(.*?) ?\}")


def read_back(trace: Path) -> dict[int, list[tuple[str, list]]]:
    """babeltrace2's reading of a CTF trace: each CPU's firings (but the pointer ones and the task events)."""
    babeltrace = need_tool("babeltrace2", "babeltrace2")
    out: dict[int, list] = {}
    for line in run([babeltrace, "--clock-cycles", str(trace)]).stdout.splitlines():
        m = BT2_EVENT.fullmatch(line)
        assert m, line
        if m[1].startswith(("sdt:", POINTER)):
            continue
        args = [f.split(" = ", 1)[1] for f in m[3].split(", ")] if m[3] else []
        out.setdefault(int(m[2]), []).append(firing(m[1], [a[1:-1] if a.startswith('"') else int(a) for a in args]))
    return out


def serve(program: Path, base: Path, cpus: int) -> subprocess.Popen:
    """The program as the process target starts it (its flags spelt here, as docs/runtime.md gives them), on the
    FIFO pair BASE.in/BASE.out that `sdtgen attach --serial BASE` opens (as QEMU's -serial pipe:BASE)."""
    os.mkfifo(f"{base}.in")
    os.mkfifo(f"{base}.out")
    fds = [os.open(f"{base}.{end}", os.O_RDWR) for end in ("in", "out")]  # neither end waits for the other
    try:
        return subprocess.Popen([str(program), "--cpus", str(cpus), "--buffer", "65536", "--packet", "4096",
                                 "--overflow", "discard", "--control"], stdin=fds[0], stdout=fds[1])
    finally:
        for fd in fds:
            os.close(fd)
