"""The serial framing: what the runtime's C (sdt_serial.c, built for this machine with gcc) writes, the
host's reader (sdtgen.transport.frames) reads back, whole, after any garbage and in pieces of any size.
CRCs are checked against zlib's, packet bytes against the layout the C header asserts."""

from __future__ import annotations

import random
import resource
import subprocess
import tempfile
import zlib
from pathlib import Path

import pytest
from helpers import ROOT, run
from serial_line import encode

from sdtgen.layout import EVENT, PACKET, VALUES
from sdtgen.transport.frames import PACKET as P
from sdtgen.transport.frames import SYNC, TEXT, VERDICT, Console, Frame, FrameReader, Info, info, verdict

RUNTIME = ROOT / "sdtgen" / "runtime"


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("serial") / "serial_harness"
    run(["gcc", "-O2", "-Wall", "-Werror", "-ffreestanding", f"-I{ROOT / 'sdtgen' / 'include'}", f"-I{RUNTIME}",
         "-o", str(exe), str(Path(__file__).with_name("serial_harness.c")), str(RUNTIME / "sdt_serial.c"),
         str(RUNTIME / "sdt_transport.c")])
    return exe


def limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))


def stream(harness: Path, *args: str, data: bytes = b"") -> bytes:
    """What the harness wrote. A drain that never ends (a consumer that never releases a packet) fails: its output
    goes to a file capped far past any run's (SIGXFSZ), and the run has a timeout."""
    with tempfile.TemporaryFile() as out:
        subprocess.run([str(harness), *args], input=data, stdout=out, stderr=subprocess.PIPE, check=True,
                       timeout=300, preexec_fn=limit_files)
        out.seek(0)
        return out.read()


def read_all(data: bytes, pieces: int = 1, seed: int = 0) -> tuple[list[Frame | Console], FrameReader]:
    reader, out, rng = FrameReader(), [], random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), min(pieces - 1, len(data) - 1))) if pieces > 1 else []
    for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
        out += reader.feed(data[a:b])
    return out + reader.close(), reader


def frames(items) -> list[Frame]:
    return [i for i in items if isinstance(i, Frame)]


def events_of(packet: bytes) -> list[tuple[int, int, int]]:
    """(id, arg0, arg1) of each event, by the layout's own fields (events start 8-aligned)."""
    head, ev = PACKET.struct(64), EVENT.struct(64)
    fields = dict(zip(PACKET.names(), head.unpack_from(packet), strict=True))
    assert fields["magic"] == VALUES["SDT_PACKET_MAGIC"]
    assert fields["content_size"] // 8 == len(packet)
    out, at = [], head.size
    while at < len(packet):
        e = dict(zip(EVENT.names(), ev.unpack_from(packet, at), strict=True))
        a, b = (int.from_bytes(packet[at + ev.size + 8 * k:at + ev.size + 8 * k + 8], "little") for k in (0, 1))
        out.append((e["id"], a, b))
        at = (at + e["size"] + 7) & ~7
    assert len(out) == fields["events"]
    return out


def test_the_crc_is_zlibs(harness):
    data = random.Random(1).randbytes(100_003)
    assert int(stream(harness, "crc", data=data), 16) == zlib.crc32(data)
    assert int(stream(harness, "crc", data=b""), 16) == 0


def test_text_frames_of_every_length_read_back(harness):
    data = stream(harness, "text")
    expected = [bytes([ord("a") + n % 26]) * n for n in range(301)]
    assert [f.payload for f in frames(read_all(data)[0])] == expected
    assert data == b"".join(encode(TEXT, p) for p in expected)  # the Python encoder writes the same bytes


@pytest.mark.parametrize("pieces", [1, 7, 5000])
def test_every_event_drained_arrives_once_in_order_with_its_verdict(harness, pieces):
    data = stream(harness, "drain", "500")
    items, reader = read_all(data, pieces)
    assert not any(isinstance(i, Console) for i in items) and reader.corrupt == 0
    fs = frames(items)
    assert info(fs[0]) == Info(123456789012, 64)
    assert fs[1] == Frame(TEXT, b"hello")
    packets = fs[2:]
    assert [f.type for f in packets] == [P, VERDICT] * (len(packets) // 2)
    got, seqs = [], []
    for pk, v in zip(packets[::2], packets[1::2], strict=True):
        seq = PACKET.struct(64).unpack_from(pk.payload)[PACKET.names().index("packet_seq_num")]
        assert verdict(v).seq == seq and verdict(v).cpu == 3 and verdict(v).keep
        seqs.append(seq)
        got += events_of(pk.payload)
    assert seqs == list(range(1, len(seqs) + 1))
    assert got == [(0x1000 + i, 3 * i, (1 << 64) - 1 - i) for i in range(500)]


def test_a_packet_its_writer_overwrote_while_it_was_sent_is_dropped(harness):
    fs = frames(read_all(stream(harness, "overwrite"))[0])
    verdicts = [verdict(f) for f in fs if f.type == VERDICT]
    assert verdicts[0].seq == 1 and not verdicts[0].keep
    assert verdicts[1:] and all(v.keep for v in verdicts[1:])
    assert [v.seq for v in verdicts[1:]] == list(range(verdicts[1].seq, verdicts[1].seq + len(verdicts) - 1))


def test_the_reader_finds_its_place_after_garbage_and_skips_a_damaged_frame(harness):
    good = stream(harness, "text")[:2000]
    first = frames(read_all(good)[0])
    rng = random.Random(7)
    noise = rng.randbytes(3000) + SYNC + rng.randbytes(20) + SYNC[:3]  # false syncs among the noise
    damaged = bytearray(encode(TEXT, b"x" * 40))
    damaged[30] ^= 0xFF
    data = b"boot: hello\n" + noise + bytes(damaged) + SYNC + good  # a false sync right before a frame
    items, reader = read_all(data, 300, seed=3)
    assert frames(items) == first
    assert reader.corrupt == 1
    console = b"".join(i.data for i in items if isinstance(i, Console))
    assert console.startswith(b"boot: hello\n" + noise[:100])


def test_a_frame_cut_short_at_the_end_is_console_not_a_frame(harness):
    data = stream(harness, "text")[:50]
    items, _ = read_all(data)
    assert items[-1] == Console(data[-(len(data) - sum(len(f.payload) + 16 for f in frames(items))):])


def test_a_header_whose_check_fails_is_console_not_a_frame():
    """A false sync followed by a header of a wrong check (its CRC right, over those very bytes) is not believed."""
    good = encode(TEXT, b"after")
    false = encode(TEXT, b"x" * 40, check=0x1234)
    items, reader = read_all(false + good)
    assert frames(items) == [Frame(TEXT, b"after")] and reader.corrupt == 0
    assert b"".join(i.data for i in items if isinstance(i, Console)) == false


def test_a_header_longer_than_any_packet_swallows_nothing():
    """A header whose check holds but whose length is more than a frame carries is not one: the frames after it
    are read at once, not taken as its payload."""
    from sdtgen.transport.frames import MAX_PAYLOAD

    huge = encode(TEXT, b"", length=MAX_PAYLOAD + 1)[:12]  # its header only: what follows would be its payload
    good = [encode(TEXT, f"line {n}".encode()) for n in range(3)]
    reader = FrameReader()
    got = reader.feed(huge + b"".join(good))  # no close: nothing may wait for bytes that will not come
    assert frames(got) == [Frame(TEXT, f"line {n}".encode()) for n in range(3)]
