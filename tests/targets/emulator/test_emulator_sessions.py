"""Sessions in the emulated boot (docs/sessions.md): the runtime's own session calls (sdt_entries), memory the emulator
maps as a kernel gives it, on two CPUs at once. Three sessions record together: a flight recorder the kernel opens
itself of every probe with `overwrite` (the fixture kernel with flight.c below, its own C calling sdt_session_open),
a streaming session of one provider's probe with a predicate, and the host's own `--session` aggregating; each holds
exactly its own filter of the native run's firings, CPU by CPU (tests/native_oracle.py, tests/session_pair.py)."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import ARCHES, SDTGEN
from native_oracle import Call
from session_pair import CALLS, HOST_SPEC, Firings, host_wants, native

from sdtgen.dscript import compile_script
from sdtgen.errors import SdtError
from sdtgen.event_format import event_format
from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session
from sdtgen.targets.base import OwnSession
from sdtgen.trace.packets import Decoder
from sdtgen.transport.geometry import packet_size_for

RING = 1 << 16
SYS_TIMEOUT = 120
FULL = os.environ.get("SDTGEN_TORTURE_FULL") == "1"  # `make torture`: the other three architectures too
# sched_run keeps no state between calls, so both CPUs run it at once; the others change the kernel's state (its
# objects' counts, its allocator, its processes), so they run on CPU 0 alone, after it.
BOTH = [Call("sched_run", (5,))]
FIRST = [Call("sched_switch", (7, 8, 3, 1, 5000, 0x40)), Call("kmem_alloc", (100,)), Call("proc_exec", (5,)),
         Call("proc_exit", (42,))]
# The fixture kernel's flight recorder, opened by the kernel's own code as docs/sessions.md shows.
FLIGHT_C = r"""
#include <sdt_runtime.h>

static struct sdt_session flight;
static char flight_mem[512 * 1024] __attribute__((aligned(64)));

int flight_open(int ncpus)
{
	struct sdt_session_config cfg = {
		.ncpus = (sdt_u32)ncpus, .policy = SDT_OVERWRITE, .ring_bytes = 64 * 1024, .packet_size = 8192,
	};
	int id = sdt_session_open(&flight, "flight", &cfg, flight_mem, sizeof(flight_mem));

	if (id < 0)
		return id;
	return sdt_session_enable(&flight, ":::", SDT_BRANCH);
}
"""
AGGREGATE = "hk:sched:: { @n[probename] = count(); }\nhk:mem:: { @n[probename] = count(); }"


@pytest.fixture(scope="session")
def flight_kernel(tmp_path_factory, arch_kernel):
    """``flight_kernel(arch)``: the fixture kernel with flight.c, built once an architecture."""
    from helpers import FIXTURE, built_once, run

    def build(arch: str) -> Path:
        def make(out: Path) -> None:
            for f in [*FIXTURE.glob("*.c"), FIXTURE / "kern.h"]:
                (out / f.name).symlink_to(f)
            (out / "flight.c").write_text(FLIGHT_C)
            (out / "Makefile").write_text(f"SRCS := {' '.join(sorted(f.name for f in FIXTURE.glob('*.c')))} flight.c\n"
                                          f"HDRS := kern.h\ninclude {FIXTURE.parent / 'fixture.mk'}\n")
            run(["make", "-C", str(out), f"O={out / 'build'}", f"SDTGEN={SDTGEN}", f"ARCH={arch}"])

        return built_once(tmp_path_factory, f"flight-{arch}", make) / "build" / "kernel.elf"

    return build


def booted(image, out: io.StringIO, own: OwnSession | None = None, cpus: int = 2):
    return open_session("emulator", str(image), Reporter(as_json=True, out=out), cpus=cpus, own=own)


class KernelSession:
    """A session the emulated kernel opens (sdt_session_open on its own memory), read by name, decoded by its id."""

    def __init__(self, session, name: str, policy: str | None, tables: int = 0) -> None:
        """``policy`` None: the session the kernel opened itself, found by name."""
        self.session, self.name = session, name
        self.id = session.target.open_session(name, RING, packet_size_for(RING), policy, tables) if policy else \
            next(x.id for x in session.target.sessions() if x.name == name)
        arch = session.image.arch
        self.decoder = Decoder([event_format(p.key, p.spec, p.args, arch.bits, arch.little)
                                for p in session.image.probes() if p.key], arch.bits, arch.little, stream=self.id)
        self.events: list = []

    def read(self, firings: Firings) -> dict[int, list]:
        """Each CPU's firings in the session, in time order."""
        def take(cpu: int, data: bytes, *seq: int) -> bool:
            self.events += self.decoder.events(bytes(data))[1]
            return True

        self.session.target.read_session(self.name, take)
        out: dict[int, list] = {}
        for e in sorted(self.events, key=lambda e: (e.ts, e.cpu)):
            out.setdefault(e.cpu, []).append(firings(e.probe, e.args))
        return out


def three_sessions(image, cpus: int = 2):
    out = io.StringIO()
    s = booted(image, out, OwnSession("agg", RING, packet_size_for(RING), "drop", 64 << 10), cpus)
    try:
        t = s.target
        assert s.run("flight_open:int", [cpus], cpu=0) > 0  # the kernel opens its flight recorder itself
        flight = KernelSession(s, "flight", None)
        stream = KernelSession(s, "stream", "drop", 64 << 10)  # a predicate is a program: it runs on tables
        [program] = compile_script(HOST_SPEC, s.probes, s.image.arch.bits).programs
        with t.scoped("stream"):
            t.enable_program(program.specs[0], "branch", t.load_program(program.code), len(program.code))
        s.aggregate(AGGREGATE)
        for c in BOTH:
            s.run(c.function, list(c.args))  # on every CPU at once
        for c in FIRST:
            s.run(c.function, list(c.args), cpu=0)
        s.printa()
        firings = Firings(image)
        got = flight.read(firings), stream.read(firings), s.sessions()
    finally:
        s.close()
    printed = [e for e in map(json.loads, out.getvalue().splitlines()) if e.get("event") == "aggregations"]
    return (*got, printed)


@pytest.mark.parametrize("arch", ARCHES if FULL else ["x86_64"])
def test_three_sessions_at_once_on_two_cpus_each_hold_their_own_filter_of_the_native_run(flight_kernel, native_exe,
                                                                                         arch):
    flight, stream, listed, [printed] = three_sessions(flight_kernel(arch))
    each = {0: native(native_exe, BOTH + FIRST), 1: native(native_exe, BOTH)}
    assert len(each[0]) > 10 and len(each[1]) < len(each[0])
    for cpu, every in each.items():
        assert flight[cpu] == every  # every probe, nothing lost
        assert stream[cpu] == [f for f in every if host_wants(*f)]  # its predicate, no other session's programs
    assert 0 < len(stream[0]) < sum(f[0] == "hk:sched:run:tick" for f in each[0])  # the predicate filtered
    want: dict[str, int] = {}
    for probe, _ in each[0] + each[1]:
        if probe.startswith(("hk:sched:", "hk:mem:")):
            name = probe.rsplit(":", 1)[1]
            want[name] = want.get(name, 0) + 1
    assert printed["session"] == "agg"
    assert {r["keys"][0]: r["value"] for r in printed["aggregations"][0]["rows"]} == want
    by_name = {x.name: x for x in listed}
    assert list(by_name) == ["default", "agg", "flight", "stream"]
    assert [(by_name[n].policy, by_name[n].cpus, by_name[n].ring) for n in ("flight", "stream")] == \
        [("overwrite", 2, RING), ("drop", 2, RING)]
    assert all((x.discarded, x.overwritten, x.misplaced) == (0, 0, 0) for x in listed)
    probes = len({p for p, _ in each[0]})
    assert by_name["flight"].probes >= probes and by_name["stream"].probes == 1 and by_name["default"].probes == 0


def test_the_hosts_session_streams_its_own_packets_and_closing_it_keeps_the_kernels_recording(kernel, native_exe):
    out = io.StringIO()
    s = booted(kernel.image, out, OwnSession("host", RING, packet_size_for(RING), "drop", 64 << 10), cpus=1)
    try:
        flight = KernelSession(s, "flight", "drop")
        with s.target.scoped("flight"):
            s.target.enable(":::", "branch")
        s.enable(HOST_SPEC)
        for c in CALLS:
            s.run(c.function, list(c.args))
        s.drain()
        s.target.close_own()  # its bit off every slot: the sites the flight recorder keeps stay armed
        later = [Call("sched_run", (3,))]
        for c in later:
            s.run(c.function, list(c.args))
        firings = Firings(kernel.image)
        theirs = flight.read(firings)
        names = [x.name for x in s.sessions()]
    finally:
        s.close()
    mine = [firings(e["probe"], e["args"]) for e in map(json.loads, out.getvalue().splitlines())
            if e.get("event") == "fire"]
    assert mine == [f for f in native(native_exe, CALLS) if host_wants(*f)] and mine
    assert theirs[0] == native(native_exe, CALLS + later)
    assert names == ["default", "flight"]


def test_a_session_beyond_the_memory_the_emulated_kernel_gives_is_refused_and_leaves_the_memory_free(kernel):
    """The runtime itself refuses (SDT_ERR_MEMORY: the largest free piece is short of what the session needs); a
    session that fits opens after it, and closing it gives its memory back for the next."""
    s = booted(kernel.image, io.StringIO(), cpus=1)
    try:
        t = s.target
        pool = t.platform.session_pool()[1]
        with pytest.raises(SdtError) as e:
            t.open_session("huge", pool, packet_size_for(pool), "drop")
        assert str(e.value).startswith(f"{kernel.image}: error: the runtime refused to open session 'huge': ")
        assert "memory" in str(e.value) and "give a smaller --buffer-size" in str(e.value)
        half = 1 << (pool.bit_length() - 2)  # a power of two, most of the pool
        t.open_session("big", half, packet_size_for(half), "drop")
        t.close_session("big")
        t.open_session("again", half, packet_size_for(half), "drop")  # its memory came back
        assert [x.name for x in t.sessions()] == ["default", "again"]
    finally:
        s.close()


def test_boot_opens_its_session_lists_it_and_traces_it_under_its_name(kernel, tmp_path):
    r = subprocess.run([SDTGEN, "boot", str(kernel.image), "--session", "mine", "--enable", "hk:sched:run:tick",
                        "--run", "kmain", "--arg", "1", "--sessions", "--trace", str(tmp_path / "t")],
                       capture_output=True, text=True, timeout=SYS_TIMEOUT)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.split()[:1] in (["0"], ["1"])]
    assert [(row[0], row[1], row[-1]) for row in rows] == [("0", "default", "0"), ("1", "mine", "1")]
    shown = babeltrace(tmp_path / "t")
    assert shown and all("hk:sched:run:tick" in line for line in shown)
    meta = subprocess.run(["babeltrace2", "--output-format=ctf-metadata", str(tmp_path / "t")], capture_output=True,
                          text=True, timeout=SYS_TIMEOUT).stdout
    assert 'session = "mine";' in meta


def babeltrace(path) -> list[str]:
    from helpers import need_tool

    need_tool("babeltrace2", "babeltrace2")
    r = subprocess.run(["babeltrace2", str(path)], capture_output=True, text=True, timeout=SYS_TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()
