"""CTF 1.8: babeltrace2, the reference reader, shows every event with every field, its timestamp and
CPU, and exactly the events each CPU's ring buffer lost."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import HZ, LOST, POINTERS, Recorded, expected
from helpers import IN_CI, need_tool, run

from sdtgen.errors import SdtError
from sdtgen.trace import TraceEvent, TraceMeta, TraceProbe, ctf, write_trace

READER = Path(__file__).with_name("bt2_read.py")
DEBIAN_PYTHON = "/usr/bin/python3"


def babeltrace2() -> str:
    return need_tool("babeltrace2", "babeltrace2")


def read_bt2(path: Path) -> list[dict]:
    """The trace as babeltrace2's Python bindings see it (python3-bt2 is Debian's, not the venv's)."""
    if not Path(DEBIAN_PYTHON).exists() or run([DEBIAN_PYTHON, "-c", "import bt2"], check=False).returncode:
        message = "babeltrace2's Python bindings not found: apt-get install python3-bt2"
        if IN_CI:
            pytest.fail(message + " (CI installs it in .ci/run)")
        pytest.skip(message)
    return [json.loads(line) for line in run([DEBIAN_PYTHON, str(READER), str(path)]).stdout.splitlines()]


def per_cpu(rows: list[dict]) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for r in rows:
        out.setdefault(r["cpu"], []).append((r["name"], r["ts"], list(r["fields"].values()), list(r["fields"])))
    return out


def want_per_cpu(rec: Recorded) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for e in rec.events:
        p = rec.probe(e)
        out.setdefault(e.cpu, []).append((p.spec, e.ts, expected(p, e.args), [f"arg{i}" for i in range(len(e.args))]))
    return out


@pytest.fixture(scope="module")
def trace(recorded, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ctf") / "trace"
    write_trace(path, "ctf", recorded.meta, recorded.events)
    return path


def test_bt2_reads_every_event_field_timestamp_and_cpu_in_stream_order(trace, recorded):
    rows = read_bt2(trace)
    events = [r for r in rows if "name" in r]
    assert len(events) == len(recorded.events)
    assert per_cpu(events) == want_per_cpu(recorded)
    ids = {p.spec: p.id for p in recorded.meta.probes}
    assert all(r["id"] == ids[r["name"]] for r in events)


def test_bt2_reports_exactly_each_cpus_lost_events(trace, recorded):
    discarded = [r for r in read_bt2(trace) if "discarded" in r]
    assert sorted((r["cpu"], r["discarded"]) for r in discarded) == sorted(LOST.items())


def test_metadata_names_the_guest_clock_and_the_tracer(trace, recorded):
    (head, *_) = read_bt2(trace)
    assert head["clock"] == {"name": "tsc", "frequency": HZ}
    env = head["trace"]
    assert (env["domain"], env["tracer_name"], env["architecture"]) == ("kernel", "sdtgen", "x86_64")
    assert env["hostname"]
    assert (trace / "metadata").read_bytes().startswith(b"/* CTF 1.8 */")
    assert sorted(p.name for p in trace.iterdir()) == ["metadata", *(f"stream_{c}" for c in range(recorded.meta.cpus))]


def test_each_stream_starts_with_the_packet_header_ctf_defines(trace, recorded):
    import struct
    import uuid

    text = (trace / "metadata").read_text()
    trace_uuid = uuid.UUID(re.search(r'\buuid = "([0-9a-f-]+)"', text)[1])
    for cpu in range(recorded.meta.cpus):
        magic, raw, stream_id = struct.unpack_from("<I16sI", (trace / f"stream_{cpu}").read_bytes())
        assert (magic, uuid.UUID(bytes=raw), stream_id) == (0xC1FC1FC1, trace_uuid, 0)


def _cli_value(ctype: str, v) -> str:
    """A field as babeltrace2's text output prints it: decimal, pointers in upper-case hex, strings quoted."""
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return f"0x{v:X}" if ctype in POINTERS else str(v)


def test_babeltrace2_prints_every_event_with_every_field(trace, recorded):
    proc = run([babeltrace2(), "--clock-cycles", str(trace)])
    line = re.compile(r"\[(\d+)\] \(\+[^)]*\) \S+ (\S+): \{ cpu_id = (\d+) \}, \{ ?(.*?) ?\}")
    got = Counter()
    for text in proc.stdout.splitlines():
        m = line.fullmatch(text)
        assert m, text
        got[(int(m[1]), m[2], int(m[3]), m[4])] += 1
    want = Counter()
    for e in recorded.events:
        p = recorded.probe(e)
        fields = ", ".join(f"arg{i} = {_cli_value(t, v)}"
                           for i, (t, v) in enumerate(zip(p.arg_types, expected(p, e.args), strict=True)))
        want[(e.ts, p.spec, e.cpu, fields)] += 1
    assert got == want
    for cpu, count in LOST.items():
        assert re.search(rf"Tracer discarded {count} events .*stream_{cpu}\"", proc.stderr), proc.stderr


def test_a_run_with_no_events_is_a_trace_babeltrace2_reads(tmp_path, recorded):
    meta = TraceMeta("aarch64", "cntvct_el0", 62_500_000, 2, recorded.meta.probes, {0: 9})
    write_trace(tmp_path / "t", "ctf", meta, [])
    assert run([babeltrace2(), str(tmp_path / "t")]).stdout == ""
    assert [r for r in read_bt2(tmp_path / "t") if "discarded" in r] == [{"discarded": 9, "cpu": 0}]


def test_many_packets_keep_every_event_and_count_the_lost_once(tmp_path, recorded, monkeypatch):
    monkeypatch.setattr(ctf, "PACKET_BYTES", 200)  # a packet every few events
    probe = TraceProbe(1, "tt", "m", "f", "n", ("int", "const char *"))
    meta = TraceMeta("i386", "tsc", 1_000_000_000, 2, (probe,), {0: 3, 1: 4})
    events = [TraceEvent(1, i % 2, i // 2 * 1_000, (i, "x" * (i % 50 + 1))) for i in range(500)]
    write_trace(tmp_path / "t", "ctf", meta, events)
    assert (tmp_path / "t" / "stream_0").read_bytes().count(b"\xc1\x1f\xfc\xc1") > 20
    rows = read_bt2(tmp_path / "t")
    assert [(r["cpu"], r["ts"], r["fields"]) for r in rows if "name" in r and r["cpu"] == 0] == \
        [(0, e.ts, {"arg0": e.args[0], "arg1": e.args[1]}) for e in events if e.cpu == 0]
    assert sorted((r["cpu"], r["discarded"]) for r in rows if "discarded" in r) == [(0, 3), (1, 4)]


def test_i386_longs_and_pointers_are_32_bits(tmp_path):
    probe = TraceProbe(0, "tt", "m", "f", "n", ("long", "unsigned long", "void *"))
    meta = TraceMeta("i386", "tsc", 1_000, 1, (probe,), {})
    write_trace(tmp_path / "t", "ctf", meta, [TraceEvent(0, 0, 5, (0xFFFFFFFF, -1, 0x8000_0000))])
    (row,) = [r for r in read_bt2(tmp_path / "t") if "name" in r]
    assert row["fields"] == {"arg0": -1, "arg1": 0xFFFFFFFF, "arg2": 0x8000_0000}


def test_rewriting_replaces_an_earlier_trace_whole(tmp_path, recorded):
    path = tmp_path / "t"
    write_trace(path, "ctf", recorded.meta, recorded.events)
    two = TraceMeta("x86_64", "tsc", HZ, 1, recorded.meta.probes, {})
    write_trace(path, "ctf", two, [e for e in recorded.events if e.cpu == 0])
    assert sorted(p.name for p in path.iterdir()) == ["metadata", "stream_0"]
    assert len([r for r in read_bt2(path) if "name" in r]) == len(recorded.on_cpu(0))
    assert [p.name for p in tmp_path.iterdir()] == ["t"]  # nothing left beside it


@pytest.mark.parametrize("make, what", [
    (lambda p: p.mkdir() or (p / "notes.txt").write_text("mine"), "would replace a directory that is not a CTF trace"),
    (lambda p: p.write_text("a file"), "is a directory and this path is a regular file"),
    (lambda p: p.mkdir() or (p / "metadata").mkdir(), "would replace a directory that is not a CTF trace"),
    (lambda p: p.mkdir() or (p / "x").write_text("") or (p / "metadata").write_text("/* CTF 1.8 */"),
     "would replace a directory that is not a CTF trace"),
    (lambda p: None, "does not exist"),
])
def test_a_path_it_must_not_write_is_one_line_and_touches_nothing(tmp_path, recorded, make, what):
    path = tmp_path / "t" if "exist" not in what else tmp_path / "missing" / "t"
    make(path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(SdtError) as e:
        write_trace(path, "ctf", recorded.meta, recorded.events)
    assert what in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith(f"{path}: error: ")
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_events_out_of_order_on_a_cpu_are_refused_before_anything_is_written(tmp_path, recorded):
    e = recorded.events
    with pytest.raises(ValueError, match="CPU 0: event 1 at"):
        write_trace(tmp_path / "t", "ctf", recorded.meta, [*recorded.on_cpu(0)[1:2], *recorded.on_cpu(0)[:1]])
    with pytest.raises(ValueError, match="does not fit"):
        write_trace(tmp_path / "t", "ctf", recorded.meta, [TraceEvent(e[0].probe_id, 0, 1, ("str", 2, 3))])
    assert list(tmp_path.iterdir()) == []


def test_an_empty_string_is_the_lone_nul_ctf_defines(tmp_path):
    # babeltrace2 2.0.4 misreads an empty string after other events (see conftest), so the bytes are checked.
    import struct

    probe = TraceProbe(7, "tt", "m", "f", "n", ("int", "const char *", "int"))
    write_trace(tmp_path / "t", "ctf", TraceMeta("x86_64", "tsc", 1, 1, (probe,), {}),
                [TraceEvent(7, 0, 1, (5, "ab", -1)), TraceEvent(7, 0, 2, (6, "", -2))])
    text = (tmp_path / "t" / "metadata").read_text()
    assert "string arg1;" in text
    data = (tmp_path / "t" / "stream_0").read_bytes()
    assert data.endswith(struct.pack("<IQi", 7, 1, 5) + b"ab\0" + struct.pack("<i", -1)
                         + struct.pack("<IQi", 7, 2, 6) + b"\0" + struct.pack("<i", -2))


def test_a_failed_rename_puts_the_earlier_trace_back(tmp_path, recorded, monkeypatch):
    import os

    path = tmp_path / "t"
    write_trace(path, "ctf", recorded.meta, recorded.events)
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    real_rename = os.rename

    def rename(src, dst):
        if str(dst) == str(path) and str(src).endswith(".tmp"):  # the new trace into place fails
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(SdtError, match="No space left on device"):
        write_trace(path, "ctf", recorded.meta, recorded.events[:3])
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["t"]


def test_each_c_integer_type_is_a_field_of_its_size_and_sign(tmp_path):
    # (declared type, value the runtime passes, what C holds after converting it to that type)
    cases = [("short", 0x18000, -0x8000), ("unsigned short", -1, 0xFFFF), ("int8_t", 0x80, -128),
             ("uint8_t", 0x1FF, 0xFF), ("signed char", 0xFF, -1), ("_Bool", 1, 1), ("uint16_t", 0x12345, 0x2345),
             ("int32_t", 0x80000000, -(1 << 31)), ("long long", (1 << 64) - 2, -2), ("size_t", -1, (1 << 64) - 1),
             ("ssize_t", (1 << 64) - 3, -3), ("u32", -1, 0xFFFFFFFF), ("s64", 1 << 63, -(1 << 63))]
    probes = tuple(TraceProbe(i, "tt", "c", "types", f"t{i}", (t,)) for i, (t, _, _) in enumerate(cases))
    events = [TraceEvent(i, 0, i, (raw,)) for i, (_, raw, _) in enumerate(cases)]
    write_trace(tmp_path / "t", "ctf", TraceMeta("x86_64", "tsc", 1000, 1, probes, {}), events)
    metadata = (tmp_path / "t" / "metadata").read_text()
    assert re.search(r"integer \{ size = 8; align = 8; signed = true; base = 10; \} arg0;", metadata)
    rows = [r for r in read_bt2(tmp_path / "t") if "name" in r]
    assert [(cases[r["id"]][0], r["fields"]["arg0"]) for r in rows] == [(t, want) for t, _, want in cases]
