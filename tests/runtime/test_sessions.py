"""Sessions in the runtime (docs/sessions.md), on the hosted platform and the real CPU
(tests/runtime/hosted/sessions.c): three threads, each a CPU, fire three probes while four sessions take them at
once: the default session (sb:::), "flight" (every probe, overwrite), "net" (sa::: through a predicate program,
discard) and "agg" (sb::: through an aggregating program). The truth is what each thread wrote down as it fired (the
native oracle): each session's events, read out of its rings by this test (its own walk of each ring by the area's
sequence numbers, the host's packet decoder for the packets), equal that session's own filter of the oracle, CPU by
CPU, in order. While "net" is disabled and enabled again and again, the sessions keeping the same sites lose
nothing; "net" closed while its CPUs record writes nothing into its memory after the close returned, and a session
opened in its id inherits nothing. Refusals (memory short, names, the session limit, an open name) change nothing.
The recorder's fast path is one compare (objdump)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from helpers import ROOT, SDTGEN, need_tool, run
from probe_source import called_probes
from programs import FakeProbe, compile_for

from sdtgen.dscript.merge import Totals
from sdtgen.dscript.tables import read_cpu
from sdtgen.event_format import event_format
from sdtgen.layout import CPU, VALUES
from sdtgen.probes import probe_key
from sdtgen.trace.packets import Decoder

HERE = Path(__file__).resolve().parent
NCPU = 3
AGG_BYTES = 1 << 16
NAMES = {"sa:net:rx:pkt": "rx", "sa:net:tx:pkt": "tx", "sb:sched:run:tick": "tick"}
PREDICATE = "sa::: /arg0 % 3 == 0/ {}"
AGGREGATION = "sb::: { @[arg1] = count(); }"


def probes() -> list[FakeProbe]:
    found = {p.spec: p for p in called_probes(HERE / "hosted") if p.spec in NAMES}
    return [FakeProbe(*spec.split(":"), found[spec].args, probe_key(found[spec].symbol)) for spec in NAMES]


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sessions")
    run(["make", "-C", str(ROOT / "fixtures" / "process"), f"O={out}", f"SDTGEN={SDTGEN}",
         f"KERNEL_SRCS={HERE / 'hosted' / 'sessions.c'}", "KERNEL_CFLAGS=", "PROGRAM_SRCS=", "EXE=sessions"])
    return out / "sessions"


@pytest.fixture(scope="module")
def ran(sessions, tmp_path_factory):
    """The program run once: its JSON lines by call, the directory of its dumps, the compiled aggregation."""
    d = tmp_path_factory.mktemp("ran")
    (d / "trace").mkdir()
    found = probes()
    (predicate,) = compile_for(PREDICATE, found).programs
    aggregation = compile_for(AGGREGATION, found)
    (d / "predicate").write_bytes(predicate.code)
    (d / "aggregation").write_bytes(aggregation.programs[0].code)
    proc = run([str(sessions), str(d), str(d / "predicate"), str(d / "aggregation")], timeout=300)
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    return lines, d, aggregation


def said(lines: list[dict], call: str) -> dict:
    (line,) = [x for x in lines if x["call"] == call]
    return line


def oracle(d: Path) -> dict[int, list[tuple[int, str, int, int]]]:
    """What each CPU's thread fired, in order: (phase, probe, arg0, arg1)."""
    out = {}
    for k in range(NCPU):
        rows = (line.split() for line in (d / f"oracle_{k}").read_text().splitlines())
        out[k] = [(int(p), probe, int(a), int(b)) for p, probe, a, b in rows]
    return out


def decoder(stream: int) -> Decoder:
    return Decoder([event_format(p.key, p.spec, p.args, 64) for p in probes()], 64, stream=stream)


def ring_events(d: Path, session: str, stream: int, cpu: int) -> tuple[list[tuple[str, tuple]], dict]:
    """The events of ``cpu``'s ring of ``session``, oldest first: the ring's packets walked by its area's sequence
    numbers (each packet's own number checked against the slot it is in), decoded by the host's decoder."""
    area = dict(zip(CPU.names(), CPU.struct(64).unpack((d / f"{session}_area_{cpu}").read_bytes()), strict=True))
    ring = (d / f"{session}_ring_{cpu}").read_bytes()
    size, n = area["packet_size"], area["packets"]
    first = max(area["read_seq"], area["commit_seq"] - n)
    dec, events = decoder(stream), []
    for seq in range(first, area["commit_seq"]):
        data = ring[(seq % n) * size:(seq % n + 1) * size]
        packet, evs = dec.events(data)
        assert (packet.seq, packet.cpu) == (seq + 1, cpu), (session, cpu, seq)
        events += [(NAMES[e.probe], tuple(e.args)) for e in evs]
    return events, area


def as_events(rows) -> list[tuple[str, tuple]]:
    return [(probe, (a, b) if probe != "tx" else (a,)) for _, probe, a, b in rows]


def differ(got: list, want: list) -> tuple[int, int, int | None]:
    """Short enough for an assertion's message (a diff of two runs' events would take pytest minutes): the lengths
    and the first index where they differ (None: equal)."""
    first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    return len(got), len(want), first if first is not None or len(got) != len(want) else None


def is_subsequence(part: list, whole: list) -> bool:
    it = iter(whole)
    return all(any(x == y for y in it) for x in part)


def test_refusals_say_why_and_change_nothing(ran):
    lines, _, _ = ran
    expect = {"memory_short": "SDT_ERR_MEMORY", "name_empty": "SDT_ERR_NAME", "name_space": "SDT_ERR_NAME",
              "name_long": "SDT_ERR_NAME", "name_default": "SDT_ERR_EXISTS", "snapshot_short": "SDT_ERR_MEMORY",
              "geometry": "SDT_ERR_ARG", "name_open": "SDT_ERR_EXISTS", "storage_open": "SDT_ERR_EXISTS",
              "full": "SDT_ERR_FULL", "close_default": "SDT_ERR_SESSION", "close_again": "SDT_ERR_SESSION",
              "enable_closed": "SDT_ERR_SESSION"}
    for call, error in expect.items():
        assert said(lines, call) == {"call": call, "returned": VALUES[error], "unchanged": 1}, call
    assert said(lines, "open")["returned"] == 1  # the first free id
    assert (said(lines, "find")["returned"], said(lines, "find_default")["returned"]) == (1, 1)
    assert said(lines, "find_closed")["returned"] == 0
    assert not [x for x in lines if x["call"] in ("fill", "empty", "left_open", "toggle")], lines


def test_each_session_equals_its_own_filter_of_the_native_run(ran):
    lines, d, _ = ran
    fired = oracle(d)
    assert all(said(lines, f"open_{s}")["returned"] == i for i, s in enumerate(("flight", "net", "agg"), 1))
    assert said(lines, "enable_flight")["returned"] == 3 and said(lines, "enable_default")["returned"] == 1
    for cpu in range(NCPU):
        assert sum(1 for r in fired[cpu] if r[0] == 0) == 3 * 3000
        # the flight recorder: every probe, every phase, nothing overwritten (its ring holds the whole run)
        flight, area = ring_events(d, "flight", 1, cpu)
        assert (area["overwritten"], area["discarded"]) == (0, 0)
        want = as_events(fired[cpu])
        assert differ(flight, want) == (len(want), len(want), None), cpu
        # net: phase A exactly its predicate's filter of sa:::; phase B (toggled) a subsequence of it
        net, area = ring_events(d, "net", 2, cpu)
        assert area["discarded"] == 0
        wanted = [r for r in fired[cpu] if r[1] in ("rx", "tx") and r[2] % 3 == 0]
        a = as_events([r for r in wanted if r[0] == 0])
        assert differ(net[:len(a)], a) == (len(a), len(a), None), cpu
        assert is_subsequence(net[len(a):], as_events([r for r in wanted if r[0] == 1])), cpu
        assert len(net) > len(a)  # B recorded some
    # the default session's own streams (the platform's consumer): sb::: of every phase
    dec = decoder(0)
    from sdtgen.trace.packets import split

    for cpu in range(NCPU):
        data = (d / "trace" / f"stream_{cpu}").read_bytes()
        events = [(NAMES[e.probe], tuple(e.args)) for p in split(data, dec) for e in dec.events(p)[1]]
        want = as_events([r for r in fired[cpu] if r[1] == "tick"])
        assert differ(events, want) == (len(want), len(want), None), cpu


def test_the_aggregation_session_counts_every_firing_of_its_probes(ran):
    lines, d, compiled = ran
    fired = oracle(d)
    assert said(lines, "switch_agg")["returned"] == NCPU
    totals = Totals(compiled.aggregations, compiled.names)
    for cpu, line in enumerate(x for x in lines if x["call"] == "agg_at"):
        blob, at = (d / f"agg_tables_{cpu}").read_bytes(), line["returned"]
        totals.add(read_cpu(lambda a, n, blob=blob, at=at: blob[a - at:a - at + n], at, 64, halves=None,
                            given=AGG_BYTES))
    want = Counter(r[3] for rows in fired.values() for r in rows if r[1] == "tick")
    (rows,) = totals.rows.values()
    assert {keys[0].raw: values[0] for keys, values in rows.items()} == dict(want)
    assert sum(totals.dropped.values()) == 0


def test_a_cpu_past_a_sessions_cpus_records_nothing_there_and_is_counted(ran):
    """"few" has one CPU: CPU 0's ticks are in its ring, the other CPUs' ticks are its misplaced count."""
    lines, d, _ = ran
    fired = oracle(d)
    assert said(lines, "open_few")["returned"] == 4
    events, area = ring_events(d, "few", 4, 0)
    want = as_events([r for r in fired[0] if r[1] == "tick"])
    assert differ(events, want) == (len(want), len(want), None) and area["discarded"] == 0
    assert said(lines, "few_misplaced")["returned"] == sum(1 for k in (1, 2) for r in fired[k] if r[1] == "tick")


def test_a_session_closed_while_its_cpus_record_writes_nothing_after(ran):
    lines, _, _ = ran
    assert said(lines, "close_net")["returned"] == 0  # flight and the default session keep every site armed
    assert said(lines, "net_written_after_close")["returned"] == 0
    assert said(lines, "misplaced")["returned"] == 0
    assert said(lines, "toggles")["returned"] > 0


def test_a_session_opened_in_a_closed_ones_id_inherits_nothing(ran):
    """"again" takes the id "net" left (2) and enables nothing: the firings after record nothing in it."""
    lines, _, _ = ran
    assert said(lines, "reopen")["returned"] == 2
    assert said(lines, "reopened_recorded")["returned"] == 0


def function(disassembly: str, name: str) -> list[str]:
    """The instructions of function ``name`` in objdump's listing."""
    body = disassembly.split(f"<{name}>:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split("\t", 1)[1].strip() for line in body.splitlines() if "\t" in line]


def test_the_fast_path_is_one_compare_of_the_route_and_no_more(sessions):
    """objdump of the built program: each recorder starts with one compare of its slot's first word (the route) and
    a branch, then a jump to the part that writes the event into this CPU's default area, which never reads the
    slot: what a probe only the default session takes costs, as before sessions."""
    listing = run([need_tool("objdump", "binutils"), "-d", "--no-show-raw-insn", str(sessions)]).stdout
    for p in called_probes(HERE / "hosted"):
        if p.spec not in NAMES:
            continue
        rec, slot, plain = f"__sdt_rec_{p.symbol}", f"__sdt_prog_{p.symbol}", f"__sdt_rec_plain_{p.symbol}"
        first = function(listing, rec)[:3]
        assert re.fullmatch(rf"cmpq\s+\$0x0,0x[0-9a-f]+\(%rip\)\s+# [0-9a-f]+ <{slot}>", first[0]), first
        assert first[1].startswith("jne ") and re.fullmatch(rf"jmp\s+[0-9a-f]+ <{plain}>", first[2]), first
        assert not [x for x in function(listing, plain) if slot in x], plain
