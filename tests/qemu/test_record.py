"""`sdtgen record` against what a line can carry: capture files of frames written here from the documented
layout (tests/serial_line.py), for a real gcc-built kernel's probes. Whatever the line or the kernel sends,
record gives a trace babeltrace2 opens, with every packet that holds and none that does not, or one error line
and no trace at all; never a traceback, a temporary directory left behind, or memory beyond what came."""

from __future__ import annotations

import io
import json
import os
import random
import resource
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT, SDTGEN, build_c_kernel, run, unavailable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serial_line import I, P, Packet, T, V, encode, event, info, text, verdict

from sdtgen.image import Image

SOURCE = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(rc);
SDT_PROBE_DEFINE1(rc, , , tick, "long");
SDT_PROBE_DEFINE1(rc, , , name, "char *");
long kmain(long v) { SDT_PROBE1(rc, , , tick, v); SDT_PROBE1(rc, , , name, "x"); return v; }
"""
HZ = 1_000_000_000
TICK, NAME = "rc:::tick", "rc:::name"


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    return build_c_kernel(tmp_path_factory.mktemp("rc"), "x86_64", SOURCE, "rc")


@pytest.fixture(scope="module")
def keys(image) -> dict[str, int]:
    with Image(str(image)) as im:
        return {p.spec: p.key for p in im.probes()}


class Kernel:
    """Packets as a kernel's runtime sends them: each CPU's numbered from 1, and its times in order."""

    def __init__(self, keys: dict[str, int]) -> None:
        self.keys = keys
        self.seq: dict[int, int] = {}
        self.clock: dict[int, int] = {}  # each CPU's next free time

    def packet(self, cpu: int, n: int = 2, name: bytes | None = None, begin: int | None = None, **fields) -> Packet:
        """A packet of ``n`` ticks (their argument each one's time), then a name event when given."""
        self.seq[cpu] = self.seq.get(cpu, 0) + 1
        begin = self.clock.get(cpu, 1000) if begin is None else begin
        events = [event(begin + 10 * k + 1, self.keys[TICK], (begin + 10 * k + 1,)) for k in range(n)]
        if name is not None:
            events.append(event(begin + 10 * n + 1, self.keys[NAME], strings=(name,)))
        end = begin + 10 * len(events) + 5
        self.clock[cpu] = end + 5
        pk = Packet(cpu, self.seq[cpu], events, begin, end)
        for k, v in fields.items():
            setattr(pk, k, v)
        return pk


def expected(packets: list[Packet]) -> list[tuple]:
    """(cpu, probe, time, argument) of every event of ``packets``, as their bytes say (a reader's truth)."""
    out = []
    for pk in packets:
        for e in pk.events:
            ts = int.from_bytes(e[:8], "little")
            arg = e[16:].split(b"\0")[0].decode() if len(e) != 24 else int.from_bytes(e[16:24], "little")
            out.append((pk.cpu, NAME if arg.__class__ is str else TICK, ts, arg))
    return sorted(out)


def babeltrace2(trace: Path) -> list[tuple]:
    """The trace's events as babeltrace2's Python bindings read them (Debian's python3-bt2): (cpu, probe, time,
    argument)."""
    python, reader = "/usr/bin/python3", ROOT / "tests" / "trace" / "bt2_read.py"
    if not Path(python).exists() or run([python, "-c", "import bt2"], check=False).returncode:
        unavailable("babeltrace2's Python bindings not found: apt-get install python3-bt2")
    proc = run([python, str(reader), str(trace)], check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(x) for x in proc.stdout.splitlines()]
    return sorted((r["cpu"], r["name"], r["ts"], r["fields"]["arg0"]) for r in rows if "name" in r)


def record(tmp_path: Path, image: Path, data: bytes, *extra: str, limit_files: int | None = None):
    """`sdtgen record --json` of a capture file holding ``data``: the process, its JSON lines, the trace's path."""
    line, trace = tmp_path / "capture", tmp_path / "trace"
    line.write_bytes(data)

    def limit() -> None:
        if limit_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit_files, limit_files))

    proc = subprocess.run([SDTGEN, "record", str(image), "--serial", str(line), "--trace", str(trace),
                           "--json", *extra], capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, [json.loads(x) for x in proc.stdout.splitlines()], trace


def summary(events: list[dict]) -> dict:
    assert events[-1]["event"] == "recorded", events[-3:]
    return events[-1]


def nothing_left(tmp_path: Path) -> None:
    """No trace and no temporary directory beside where it would have been."""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capture"]


def test_what_a_kernel_streams_is_recorded_and_shown_in_time_order(image, keys, tmp_path):
    k = Kernel(keys)
    # CPU 1's first packet comes before CPU 0's second, which holds events of earlier times than some of it.
    packets = [k.packet(0, name=b"first"), k.packet(1, 3, begin=1035), k.packet(0, name="naïve ☃".encode()),
               k.packet(1, 1)]
    data = info(HZ) + text("hello") + b"console bytes\n" + b"".join(pk.sent() for pk in packets)
    proc, events, trace = record(tmp_path, image, data)
    assert proc.returncode == 0, proc.stderr
    assert babeltrace2(trace) == expected(packets)
    fires = [(e["cpu"], e["probe"], e["ts"], e["args"][0]) for e in events if e["event"] == "fire"]
    assert fires == sorted(expected(packets), key=lambda f: (f[2], f[0]))  # shown by time as they came
    assert [e["text"] for e in events if e["event"] == "text"] == ["hello", "console bytes"]
    assert summary(events) == {"event": "recorded", "trace": str(trace), "packets": 4, "events": 10, "cpus": 2,
                               "dropped": 0, "damaged": 0}


def test_quiet_shows_no_event_and_counts_them(image, keys, tmp_path):
    k = Kernel(keys)
    packets = [k.packet(0, 5), k.packet(0, 4, name=b"x")]
    proc, events, trace = record(tmp_path, image, info(HZ) + b"".join(pk.sent() for pk in packets), "-q")
    assert proc.returncode == 0 and not [e for e in events if e["event"] == "fire"]
    assert summary(events)["events"] == 10 and babeltrace2(trace) == expected(packets)


def test_record_names_its_image_as_every_command_does(image, keys, tmp_path):
    """`record IMAGE --serial LINE --trace DIR`: the image first and positional, as boot, qemu, attach, torture and
    check take theirs; the old `--image IMAGE` is one usage line (exit 2) and leaves nothing."""
    k = Kernel(keys)
    packets = [k.packet(0, 2)]
    proc, events, trace = record(tmp_path, image, info(HZ) + b"".join(pk.sent() for pk in packets))
    assert proc.returncode == 0 and summary(events)["events"] == 2 and babeltrace2(trace) == expected(packets)
    old = tmp_path / "old"
    old.mkdir()
    (old / "capture").write_bytes(info(HZ))
    r = subprocess.run([SDTGEN, "record", "--serial", str(old / "capture"), "--image", str(image), "--trace",
                        str(old / "trace")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert "--image" in r.stderr and "sdtgen record --help" in r.stderr
    nothing_left(old)


def _ts(e: bytes, ts: int) -> bytes:
    return ts.to_bytes(8, "little") + e[8:]


# Each case: the packets a kernel sent, then what the line carried instead (one damaged packet in its place).
def duplicated(k, good):
    return good, [*good[:2], good[1], *good[2:]]


def reordered(k, good):
    return [good[0], good[3], good[2]], [good[0], good[3], good[1], good[2]]  # CPU 1's second before its first


def numbered_backwards(k, good):
    return good, [*good, k.packet(1, seq=1)]  # its times after the others': a reader takes it as 2^64-1 lost


def ends_before_it_begins(k, good):
    bad = k.packet(0, 0)
    bad.end = bad.begin - 1
    return good, [*good, bad]


def begins_before_the_last_ended(k, good):
    bad = k.packet(0)
    bad.begin = good[2].end - 1
    return good, [*good, bad]


def an_event_of_no_probe(k, good):
    bad = k.packet(0)
    bad.events[1] = bad.events[1][:8] + (k.keys[TICK] ^ 1).to_bytes(4, "little") + bad.events[1][12:]
    return good, [*good, bad]


def a_string_without_its_end(k, good):
    bad = k.packet(0, name=b"abc")
    bad.events[-1] = bad.events[-1][:-1]
    return good, [*good, bad]


def content_past_its_last_event(k, good):
    bad = k.packet(0, 1, name=b"ab")
    bad.events[-1] += bytes(13)  # past the last event's padding: room for part of another
    return good, [*good, bad]


def an_event_longer_than_its_fields(k, good):
    bad = k.packet(0, 2)
    tick, ts = bad.events[1], int.from_bytes(bad.events[0][:8], "little") + 1
    name = bytearray(event(ts, k.keys[NAME], strings=(b"ab",)) + bytes(21))
    name[12:14] = len(name).to_bytes(2, "little")  # 40 bytes, where its fields take 19: a reader goes on at 24
    bad.events[1:] = [bytes(name), tick]
    return good, [*good, bad]


def times_backwards_inside(k, good):
    bad = k.packet(0, 3)
    bad.events[2] = _ts(bad.events[2], int.from_bytes(bad.events[1][:8], "little") - 1)
    return good, [*good, bad]


def times_backwards_among_probes(k, good):
    bad = k.packet(0, 2, name=b"late")
    bad.events[2] = _ts(bad.events[2], int.from_bytes(bad.events[0][:8], "little"))
    return good, [*good, bad]


def an_event_before_its_packet(k, good):
    bad = k.packet(0)
    bad.events[0] = _ts(bad.events[0], bad.begin - 1)
    return good, [*good, bad]


def discarded_count_falls(k, good):
    good[0].discarded = good[2].discarded = 5
    bad = k.packet(0, discarded=4)
    return good, [*good, bad]


def discarded_count_of_2_64_minus_1(k, good):
    return good, [*good, k.packet(0, discarded=(1 << 64) - 1)]


def a_time_no_reader_holds(k, good):
    bad = k.packet(0, 0)
    bad.begin, bad.end = 1 << 62, 1 << 63
    return good, [*good, bad]


def another_stream_id(k, good):
    return good, [*good, k.packet(0, stream=1)]


def a_cpu_past_the_last(k, good):
    return good, [*good, k.packet(4096)]


def a_packet_of_128_mib(k, good):
    return good, [*good, k.packet(2, size=128 << 20)]  # the first packet of its CPU: nothing to compare with


def another_packet_size(k, good):
    return good, [*good, k.packet(1, size=2048)]


CASES = [duplicated, reordered, numbered_backwards, ends_before_it_begins, begins_before_the_last_ended,
         an_event_of_no_probe, a_string_without_its_end, content_past_its_last_event, an_event_longer_than_its_fields,
         times_backwards_inside,
         times_backwards_among_probes,
         an_event_before_its_packet, discarded_count_falls, discarded_count_of_2_64_minus_1, a_time_no_reader_holds,
         another_stream_id, a_cpu_past_the_last, a_packet_of_128_mib, another_packet_size]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_a_damaged_packet_is_left_out_and_the_trace_opens(image, keys, tmp_path, case):
    k = Kernel(keys)
    good = [k.packet(0, name=b"one"), k.packet(1, 3), k.packet(0, 1), k.packet(1, 2)]
    kept, sent = case(k, good)
    proc, events, trace = record(tmp_path, image, info(HZ) + b"".join(pk.sent() for pk in sent))
    assert proc.returncode == 0, proc.stderr
    assert babeltrace2(trace) == expected(kept)
    assert summary(events)["damaged"] == 1 and summary(events)["packets"] == len(kept)
    (warning,) = [e["text"] for e in events if e["event"] == "warning"]
    assert warning.startswith("a damaged packet left out: "), warning
    assert sum(f.stat().st_size for f in trace.iterdir()) < 64 << 10  # no packet padded out to what it claimed


def test_content_that_runs_into_the_last_events_padding_is_traced_to_its_fields(image, keys, tmp_path):
    """i386's recorders reserve an event a multiple of 8 bytes, so a packet's content can end in the last event's
    padding; babeltrace2 would look for another event there, so the trace's header says where its fields end."""
    k = Kernel(keys)
    packets = [k.packet(0, 1, name=b"ab"), k.packet(0, 2, name=b"abcd")]
    for pk in packets:
        pk.events[-1] += b"\0\0"  # 19 and 21 bytes of fields: 2 bytes of padding each, inside the content
    proc, events, trace = record(tmp_path, image, info(HZ) + b"".join(pk.sent() for pk in packets))
    assert proc.returncode == 0 and summary(events)["damaged"] == 0, proc.stderr
    assert babeltrace2(trace) == expected(packets)


def test_a_packet_whose_header_and_events_disagree_is_left_out(image, keys, tmp_path):
    k = Kernel(keys)
    good = [k.packet(0, 2)]
    bad = k.packet(0, 3)
    content = bytearray(bad.content())
    content[60:64] = (2).to_bytes(4, "little")  # its header says 2 events of the 3 it holds
    proc, events, trace = record(tmp_path, image, info(HZ) + good[0].sent() + encode(P, bytes(content))
                                 + verdict(bad.seq, 0))
    assert proc.returncode == 0 and summary(events)["damaged"] == 1 and babeltrace2(trace) == expected(good)


@pytest.mark.parametrize("hz", [0, (1 << 64) - 1])
def test_a_clock_no_trace_can_declare_is_one_error_line_and_no_trace(image, keys, tmp_path, hz):
    k = Kernel(keys)
    proc, _, _ = record(tmp_path, image, info(hz) + k.packet(0).sent())
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"the kernel's info frame gives a clock of {hz} Hz" in proc.stderr
    nothing_left(tmp_path)


def test_frames_of_a_wrong_size_are_counted_damaged(image, keys, tmp_path):
    """An info or verdict frame whose CRC holds but whose payload is not its type's (a kernel can send them)."""
    k = Kernel(keys)
    one, two = k.packet(0), k.packet(0)
    data = (encode(I, b"\0" * 15) + info(HZ) + encode(P, one.content()) + encode(V, b"\1" * 17) + verdict(one.seq, 0)
            + encode(ord("X"), b"?") + two.sent())
    proc, events, trace = record(tmp_path, image, data)
    assert proc.returncode == 0, proc.stderr
    assert summary(events)["damaged"] == 3 and babeltrace2(trace) == expected([one, two])


def test_a_refusal_after_the_trace_began_leaves_nothing(image, keys, tmp_path):
    k = Kernel(keys)
    proc, _, _ = record(tmp_path, image, info(HZ) + k.packet(0).sent() + info(HZ, 32))
    assert proc.returncode == 2 and "the kernel's info frame changed" in proc.stderr and proc.stderr.count("\n") == 1
    nothing_left(tmp_path)


def test_many_cpus_do_not_need_a_file_each_open(image, keys, tmp_path):
    """300 CPUs' streams with 64 file descriptors: every packet is in the trace."""
    k = Kernel(keys)
    packets = [k.packet(cpu, 1) for cpu in range(300)]
    proc, events, trace = record(tmp_path, image, info(HZ) + b"".join(pk.sent() for pk in packets), "-q",
                                 limit_files=64)
    assert proc.returncode == 0, proc.stderr
    assert summary(events)["cpus"] == 300 and babeltrace2(trace) == expected(packets)


@pytest.mark.parametrize(("serial", "said"), [
    (b"tcp:localhost:\xc2\xb2", "is not tcp:HOST:PORT"),  # a digit to str.isdigit, not to int()
    (b"tcp:localhost:70000", "is not tcp:HOST:PORT"), (b"tcp:localhost:0", "is not tcp:HOST:PORT"),
    (b"tcp::4444", "is not tcp:HOST:PORT"), (b"tcp:a\x07b:4444", "is not tcp:HOST:PORT"),
    (b"tcp:a\nb:4444", "is not tcp:HOST:PORT"), (b"tcp:\xff:4444", "is not tcp:HOST:PORT"),  # not UTF-8
    (b"tcp:" + b"x" * 70 + b".example:4444", "cannot connect to "),  # a label too long for IDNA
])
def test_a_serial_line_that_is_not_one_is_one_error_line(image, tmp_path, serial, said):
    proc = subprocess.run([SDTGEN.encode(), b"record", bytes(image), b"--serial", serial, b"--trace",
                           bytes(tmp_path / "trace")], capture_output=True, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("sdtgen: error: ") and said in err, err
    assert not list(tmp_path.iterdir())


def test_a_connection_reset_ends_the_recording_with_what_came(image, keys, tmp_path):
    """QEMU killed: its end of the TCP line resets, and the recording ends there, keeping what came."""
    import socket
    import struct

    k = Kernel(keys)
    pk = k.packet(0)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        proc = subprocess.Popen([SDTGEN, "record", str(image), "--serial", f"tcp:127.0.0.1:{port}",
                                 "--trace", str(tmp_path / "trace"), "--json"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        conn, _ = server.accept()
        conn.sendall(info(HZ) + pk.sent())
        first = json.loads(proc.stdout.readline())  # its event shown: every byte sent was read
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # a reset, not an orderly end
        out, err = proc.communicate(timeout=60)
    events = [first, *(json.loads(x) for x in out.splitlines())]
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert [e["text"] for e in events if e["event"] == "warning"] == ["the line ended: Connection reset by peer"]
    assert summary(events)["packets"] == 1 and babeltrace2(tmp_path / "trace") == expected([pk])


FUZZ_EXAMPLES = int(os.environ.get("SDTGEN_FUZZ_EXAMPLES", "20"))


def hostile_line(rng: random.Random, k: Kernel) -> bytes:
    """A line of everything a kernel or a line can send: packets (some with bytes changed), verdicts for them or
    others, info frames of good and bad clocks and word sizes, frames of every type with random payloads, false
    syncs, noise and text."""
    parts = []
    for _ in range(rng.randrange(1, 30)):
        r = rng.random()
        if r < 0.35:
            pk = k.packet(rng.randrange(4), rng.randrange(6), name=rng.choice([None, b"", b"abc"]))
            c = bytearray(pk.content())
            for _ in range(rng.choice([0, 0, 1, 3])):
                c[rng.randrange(len(c))] = rng.randrange(256)
            parts.append(encode(P, bytes(c)) + verdict(pk.seq if rng.random() < .9 else rng.randrange(9),
                                                       pk.cpu if rng.random() < .9 else rng.randrange(5000),
                                                       rng.random() < .9))
        elif r < 0.38:
            parts.append(info(rng.choice([HZ, HZ, 0, 2**63, 2**64 - 1]), rng.choice([64, 64, 32])))
        elif r < 0.6:
            parts.append(encode(rng.choice([P, V, I, T, 0, 255]), rng.randbytes(rng.randrange(0, 200))))
        elif r < 0.7:
            parts.append(rng.randbytes(rng.randrange(1, 100)))
        elif r < 0.8:
            parts.append(b"\xa5\x5aSD" + rng.randbytes(rng.randrange(0, 20)))
        else:
            parts.append(text(f"line {rng.randrange(100)}"))
    return b"".join(parts)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 1 << 32))
def test_whatever_the_line_carries_the_trace_opens_or_nothing_is_left(image, keys, tmp_path_factory, seed):
    from sdtgen.errors import SdtError
    from sdtgen.session.reporter import Reporter
    from sdtgen.session.session import Session
    from sdtgen.targets import open_target

    rng = random.Random(seed)
    data = hostile_line(rng, Kernel(keys))
    where = tmp_path_factory.mktemp("fuzz")
    trace = where / "trace"
    reporter = Reporter(as_json=True, out=io.StringIO(), err=io.StringIO(), quiet=rng.random() < .3)
    step = rng.randrange(1, 200)
    chunks = [data[i:i + step] for i in range(0, len(data), step)]
    try:
        session = Session(str(image), reporter, lambda host: open_target("listen", host, source=iter(chunks)),
                          trace=(str(trace), "ctf"))
        try:
            session.listen()
            session.finish_trace()
        finally:
            session.close()
    except SdtError:
        assert list(where.iterdir()) == []  # no trace, no temporary directory
        return
    babeltrace2(trace)  # it opens
