"""Programs and their tables through the control core (sdtgen/targets/control.py, sdt_control.c), on the fixture
kernel run as a Linux process (fixtures/process, threads as CPUs on this machine's cores), both arming modes: the
merged aggregations are exactly what the native run's firings make (tests/aggregate_expect.py); clear() starts
them again; a table frame the kernel (or the line) spoiled is refused, whatever it claims."""

from __future__ import annotations

import io
import json
import struct

import pytest
from aggregate_expect import CALLS, SCRIPT, expected, printed
from native_oracle import Call, run_native

from sdtgen.dscript.tables import CpuTables
from sdtgen.layout import AGG, AGG_ENTRY, WORD
from sdtgen.session.reporter import Reporter
from sdtgen.session.session import Session
from sdtgen.targets import open_target
from sdtgen.targets.base import DamagedTables
from sdtgen.targets.control import tables_of_frame

CPUS = 2


def process_session(image, out: io.StringIO, mode: str = "trap") -> Session:
    return Session(str(image), Reporter(as_json=True, out=out),
                   lambda host: open_target("process", host, cpus=CPUS, buffer_size=1 << 16, timeout=60), arm=mode)


def last_aggregations(out: io.StringIO) -> dict:
    return [e for e in map(json.loads, out.getvalue().splitlines()) if e["event"] == "aggregations"][-1]


@pytest.mark.parametrize("mode", ["trap", "branch"])
def test_the_process_aggregates_exactly_what_the_native_firings_make(kernel_proc, native_exe, mode):
    firings = [e for e in run_native(native_exe, CALLS) if "probe" in e]
    out = io.StringIO()
    s = process_session(kernel_proc, out, mode)
    try:
        assert s.aggregate(SCRIPT) > 0
        for c in CALLS:
            s.run(f"{c.function}:long", list(c.args))
        s.printa()
        aggs = last_aggregations(out)
        assert (aggs["dropped"], aggs["errors"], aggs["nested"]) == (0, 0, 0)
        assert printed(aggs, firings, CPUS) == expected(firings, CPUS)
        assert s.hits == {}, "aggregating clauses record nothing"
        s.clear()
        s.run("sched_run:long", [4])
        s.printa()
        ticks = {a["name"]: a["rows"] for a in last_aggregations(out)["aggregations"]}["ticks"]
        assert ticks == [{"keys": [], "value": CPUS * 4}], "clear: the totals started again"
    finally:
        s.close()


@pytest.fixture(scope="module")
def real_frame(kernel_proc):
    """A frame of CPU 0's frozen half as the kernel sent it, with where its table is and its size."""
    s = process_session(kernel_proc, io.StringIO())
    try:
        s.aggregate("hk:sched:run:tick { @n = count(); @q[cpu] = quantize(arg1) }")
        s.run("sched_run:long", [9])
        t = s.target
        t.command(WORD["switch"], "switch")
        t._taken = []
        t.command(f"{WORD['take']} 0", "take")
        [frame] = t._taken
        addr, given = t._tables[0]
        return frame, addr, given, s.image.arch
    finally:
        s.close()


def spoiled(frame: bytes, arch, **fields: int) -> bytes:
    st = AGG.struct(arch.bits, arch.little)
    raw = dict(zip(AGG.names(), st.unpack(frame[:st.size]), strict=True))
    raw.update(fields)
    return st.pack(*raw.values()) + frame[st.size:]


def test_a_real_frame_reads_as_the_cpu_s_half(real_frame):
    frame, addr, given, arch = real_frame
    t = tables_of_frame([frame], 0, addr, given, arch)
    assert isinstance(t, CpuTables) and t.cpu == 0
    assert sorted(len(e.values) for e in t.entries) == [1, 127], "the count and CPU 0's quantize row"


def hostile(frame: bytes, arch) -> dict[str, list[bytes]]:
    st = AGG.struct(arch.bits, arch.little)
    raw = dict(zip(AGG.names(), st.unpack(frame[:st.size]), strict=True))
    half = 1 - raw["want"]
    used = raw[f"used[{half}]"]
    entry = bytearray(frame)
    nkeys_at = st.size + AGG_ENTRY.offset("nkeys", arch.bits)
    entry[nkeys_at:nkeys_at + 2] = struct.pack("<H" if arch.little else ">H", 4000)
    return {
        "two frames": [frame, frame], "none": [],
        "shorter than a struct sdt_agg": [frame[:20]],
        "a half that is neither": [spoiled(frame, arch, want=7)],
        "more used than it carries": [spoiled(frame, arch, **{f"used[{half}]": used + 8})],
        "fewer bytes than used": [frame[:-8]],
        "another address": [spoiled(frame, arch, self=raw["self"] + 64)],
        "another CPU": [spoiled(frame, arch, cpu=1)],
        "a bigger arena": [spoiled(frame, arch, arena_size=raw["arena_size"] * 2)],
        "an entry of 4000 keys": [bytes(entry)],
        "a count of entries it does not hold": [spoiled(frame, arch, **{f"entries[{half}]": 9})],
    }


@pytest.mark.parametrize("case", list(hostile(bytes(512), type("A", (), {"bits": 64, "little": True}))))
def test_a_spoiled_frame_is_refused_whatever_it_claims(real_frame, case):
    frame, addr, given, arch = real_frame
    t = tables_of_frame(hostile(frame, arch)[case], 0, addr, given, arch)
    assert isinstance(t, DamagedTables), case


def test_probe_names_as_keys_print_as_names_when_two_programs_update_them(kernel_proc, native_exe):
    """hk:mem:alloc:entry matches both clauses, the other alloc probes only the second: two programs key @n."""
    calls = [Call("kmem_alloc", (300,)), Call("kmem_alloc", (-5,))]
    firings = [e for e in run_native(native_exe, calls) if e.get("probe", "").startswith("hk:mem:alloc:")]
    out = io.StringIO()
    s = process_session(kernel_proc, out)
    try:
        s.aggregate("hk:mem:alloc:entry { @p = count(); }\nhk:mem:alloc: { @n[probefunc, probename] = count(); }")
        for c in calls:
            s.run(f"{c.function}:long", list(c.args))
        s.printa()
        rows = {a["name"]: {tuple(r["keys"]): r["value"] for r in a["rows"]}
                for a in last_aggregations(out)["aggregations"]}
        want: dict[tuple, int] = {}
        for f in firings:
            key = ("alloc", f["probe"].split(":")[3])
            want[key] = want.get(key, 0) + CPUS
        assert rows["n"] == want
    finally:
        s.close()


def test_the_tables_capacity_counts_the_struct_the_memory_holds(kernel_proc, native_exe):
    """fixtures/process gives 256 KiB a CPU, struct sdt_agg included: a half's index is rounded down to 1024 slots,
    768 entries of a one-key count (against the emulator's 1536 for 256 KiB of tables alone). The first 768 keys that
    fired (the native run's order) are what the kernel keeps; --json says 768."""
    calls = [Call("sched_run", (1000,))]
    keys = list(dict.fromkeys(f["args"][0] for f in run_native(native_exe, calls)
                              if f.get("probe") == "hk:sched:run:tick"))
    out = io.StringIO()
    s = process_session(kernel_proc, out)
    try:
        s.aggregate("hk:sched:run:tick @[arg0] = count()")
        s.run("sched_run:long", [1000])
        s.printa()
        aggs = last_aggregations(out)
    finally:
        s.close()
    assert [c["entries"] for c in aggs["capacity"]] == [768] * CPUS
    assert {r["keys"][0]: r["value"] for r in aggs["aggregations"][0]["rows"]} == dict.fromkeys(keys[:768], CPUS)
    assert aggs["dropped"] == CPUS * (len(keys) - 768)
