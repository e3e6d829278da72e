"""Sessions over the control core (docs/sessions.md), driven through the real process: fixtures/process's kernel-proc
with `--control` (the hosted main, the control protocol on standard input and output) opens two sessions of the
host's own beside the default session, arms each with its own spec, runs the fixture's kmain on both CPUs, and
lists them. Every reply line parses by sdtgen/layout.py's REPLIES; each session's counts say what the run put in it
(the default session took nothing), and the refusals (a budget exceeded, an unknown session, a command that is not a
session's, closing a session twice) are clear errors."""

from __future__ import annotations

import struct
import subprocess
import zlib
from pathlib import Path

from helpers import need_tool, readelf_symbols

from sdtgen.layout import FRAME_HEADER, PROCESS_ARG, VALUES, WORD, parse_reply

ESC = chr(VALUES["SDT_CONTROL_ESCAPE"])
CPUS = 2


def control(process: Path, commands: list[str]) -> bytes:
    """The process's standard output (frames) for ``commands``, each sent as a host sends it."""
    # no address space randomization (setarch -R): the run that said where the program is loaded and the run that
    # calls into it load it at the same address
    proc = subprocess.run([need_tool("setarch", "util-linux"), "-R", str(process), PROCESS_ARG["cpus"], str(CPUS),
                           PROCESS_ARG["control"]],
                          input="".join(f"{ESC}{c}\n" for c in commands).encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def frames(out: bytes) -> list[tuple[int, bytes]]:
    """Every frame on the process's standard output in order, (type, payload), each checked by its CRC (an
    independent reader of the frame format: header, payload, zlib's CRC-32 of bytes 4.. of the header and the
    payload)."""
    head, found, at = FRAME_HEADER.struct(64), [], 0
    while at + head.size <= len(out):
        sync, kind, _, _, length = head.unpack_from(out, at)
        assert sync == VALUES["SDT_FRAME_SYNC"], at
        payload = out[at + head.size:at + head.size + length]
        (crc,) = struct.unpack_from("<I", out, at + head.size + length)
        assert crc == zlib.crc32(out[at + 4:at + head.size] + payload), at
        found.append((kind, payload))
        at += head.size + length + 4
    return found


def text_lines(out: bytes) -> list[str]:
    """The text frames on the process's standard output, each checked by its CRC (frames())."""
    return [payload.decode() for kind, payload in frames(out) if kind == VALUES["SDT_FRAME_TEXT"]]


def replies(lines: list[str], commands: list[str]) -> list[list[str]]:
    """The lines of each command's reply, up to its `ok` or `error` line (after the hello said unasked)."""
    assert lines[0].startswith(WORD["hello"] + " ") and lines[1].startswith(WORD["ok"] + " ")
    out, at = [], 2
    for _ in commands:
        reply = []
        while True:
            reply.append(lines[at])
            at += 1
            if reply[-1].split()[0] in (WORD["ok"], WORD["error"]):
                break
        out.append(reply)
    return out


def test_two_host_sessions_beside_the_default_one(process):
    symbols = {name: value for value, _, _, _, _, name in readelf_symbols(process)}
    hello = parse_reply("hello", text_lines(control(process, []))[0])[1]
    kmain = symbols["kmain"] + hello["entries"] - symbols["sdt_runtime_entries"]  # PIE: where it was loaded
    big = VALUES["SDT_LINUX_SESSION_MEMORY"]  # each CPU's ring that big: twice the budget
    commands = [
        "session open flt 10000 1000 1",  # 64 KiB rings of 4 KiB packets, overwrite
        "session open sched 4000 1000 0 10000",  # 16 KiB rings, discard, 64 KiB of tables a CPU
        f"session open huge {big:x} 1000 0",
        "session open flt 4000 1000 0",
        "@flt enable branch hk:::",
        "@sched enable trap hk:sched::",
        f"run all {kmain:x} 1 3",
        "@flt flush",
        "@sched flush",
        "sessions",
        "@flt stats",
        "@sched tables",
        "@sched switch",
        "@nosuch stats",
        "@flt mode trap",
        "@flt drain",
        "session close sched",
        "session close sched",
        "session close default",
        "sessions",
    ]
    pairs = list(zip(commands, replies(text_lines(control(process, commands)), commands), strict=True))
    for command, reply in pairs:  # every line parses as its command's REPLIES say
        word = command.split()[1] if command.startswith("@") else command.split()[0]
        for line in reply[:-1]:
            assert parse_reply(word, line) is not None, (command, line)
        assert parse_reply("", reply[-1]) is not None or reply[-1].startswith(WORD["error"] + " "), reply

    def got(command: str, nth: int = 0) -> list[str]:
        return [r for c, r in pairs if c == command][nth]

    def ok(command: str, nth: int = 0) -> int:
        word, fields = parse_reply("", got(command, nth)[-1])
        assert word == "ok", (command, got(command, nth))
        return fields["count"]

    def error(command: str, nth: int = 0) -> int:
        return int(got(command, nth)[-1].split()[1])

    def listed(nth: int) -> dict[str, dict]:
        return {f["name"]: f for f in (parse_reply("sessions", line)[1] for line in got("sessions", nth)[:-1])}

    assert (ok("session open flt 10000 1000 1"), ok("session open sched 4000 1000 0 10000")) == (1, 2)
    assert error(f"session open huge {big:x} 1000 0") == VALUES["SDT_ERR_MEMORY"]
    assert error("session open flt 4000 1000 0") == VALUES["SDT_ERR_EXISTS"]
    assert ok("@flt enable branch hk:::") > ok("@sched enable trap hk:sched::") > 0
    rows = listed(0)
    assert list(rows) == ["default", "flt", "sched"] and ok("sessions") == 3
    assert [rows[n]["id"] for n in rows] == [0, 1, 2]
    assert (rows["flt"]["policy"], rows["flt"]["ring"], rows["flt"]["packet"]) == (1, 0x10000, 0x1000)
    assert (rows["sched"]["policy"], rows["sched"]["cpus"]) == (0, CPUS)
    # kmain on both CPUs fires hk probes: flt took every one (a packet on each CPU at least), sched its own
    assert rows["flt"]["packets"] >= CPUS and rows["sched"]["packets"] >= 1
    assert rows["default"]["packets"] == 0  # the default session enabled nothing
    assert rows["flt"]["probes"] > rows["sched"]["probes"] > 0 and rows["default"]["probes"] == 0
    assert all(rows[n]["discarded"] == rows[n]["overwritten"] == rows[n]["misplaced"] == 0 for n in rows)
    assert ok("@flt stats") == CPUS and ok("@sched tables") == CPUS and ok("@sched switch") == CPUS
    assert error("@nosuch stats") == VALUES["SDT_ERR_SESSION"]
    # the error names the command after @NAME, the one a host waits for a reply to
    assert parse_reply("", got("@nosuch stats")[-1])[1]["command"] == "stats"
    assert error("@flt mode trap") == VALUES["SDT_ERR_USAGE"]
    assert ok("@flt drain") == CPUS  # each CPU's area of the session sent on the line
    assert ok("session close sched") == 0  # flt keeps every site sched took
    assert error("session close sched", 1) == VALUES["SDT_ERR_SESSION"]
    assert error("session close default") == VALUES["SDT_ERR_SESSION"]
    assert list(listed(1)) == ["default", "flt"] and ok("sessions", 1) == 2


def packets_before_each_reply(out: bytes) -> list[list[tuple[int, int, int, int]]]:
    """For each reply's last line (`ok`/`error`), the packets framed since the one before: (stream_id, cpu_id,
    packet_seq_num, its verdict's keep), read by the header's CTF layout (magic, stream id, ..., seq at 40, cpu at
    56) and the verdict frame that follows each packet."""
    out_lists, now, pending = [], [], None
    for kind, payload in frames(out):
        if kind == VALUES["SDT_FRAME_PACKET"]:
            magic, stream = struct.unpack_from("<II", payload, 0)
            assert magic == VALUES["SDT_PACKET_MAGIC"]
            (seq,) = struct.unpack_from("<Q", payload, 40)
            (cpu,) = struct.unpack_from("<I", payload, 56)
            pending = (stream, cpu, seq)
        elif kind == VALUES["SDT_FRAME_VERDICT"]:
            seq, cpu, keep = struct.unpack("<QII", payload)
            assert pending is not None and (pending[2], pending[1]) == (seq, cpu)
            now.append((*pending, keep))
            pending = None
        elif kind == VALUES["SDT_FRAME_TEXT"] and payload.split()[0].decode() in (WORD["ok"], WORD["error"]):
            out_lists.append(now)
            now = []
    return out_lists


def test_a_sessions_drain_sends_each_of_its_packets_once_with_its_own_stream_id(process):
    symbols = {name: value for value, _, _, _, _, name in readelf_symbols(process)}
    hello = parse_reply("hello", text_lines(control(process, []))[0])[1]
    kmain = symbols["kmain"] + hello["entries"] - symbols["sdt_runtime_entries"]
    commands = [
        "session open flt 10000 1000 1",
        "session open sched 4000 1000 0",  # discard: a ring drained on the line is free again
        "@flt enable branch hk:::",
        "@sched enable trap hk:sched::",
        f"run all {kmain:x} 1 3",
        "@flt flush",
        "@sched flush",
        "sessions",
        "@sched drain",
        "@sched drain",
        "@flt drain",
        "drain",
    ]
    out = control(process, commands)
    lines = replies(text_lines(out), commands)
    said = lines[commands.index("sessions")][:-1]
    listed = {f["name"]: f for f in (parse_reply("sessions", line)[1] for line in said)}
    sent = packets_before_each_reply(out)[1:]  # the hello's own `ok` ends the first list; then one per command
    first, again = sent[commands.index("@sched drain")], sent[commands.index("@sched drain") + 1]
    flt, default = sent[commands.index("@flt drain")], sent[commands.index("drain")]
    assert [c.split()[0] for c, r in zip(commands, lines, strict=True) if r[-1].split()[0] != WORD["ok"]] == []
    # every packet the session closed, once, each with its own session's id and kept whole
    assert len(first) == listed["sched"]["packets"] > 0 and {p[0] for p in first} == {listed["sched"]["id"]}
    assert all(keep == 1 for *_, keep in first)
    for cpu in {p[1] for p in first}:  # each CPU's packets in order from 1, none skipped
        assert [p[2] for p in first if p[1] == cpu] == list(range(1, 1 + sum(p[1] == cpu for p in first)))
    assert again == []  # consumed: a second drain finds nothing
    assert len(flt) == listed["flt"]["packets"] and {p[0] for p in flt} == {listed["flt"]["id"]}
    assert default == []  # the default session enabled nothing


def test_a_host_opens_a_session_with_a_snapshot_area_and_takes_snapshots_of_it(process):
    """`session open ... AGGBYTES SNAPSHOT_PACKETS` and `snapshot NAME` (docs/sessions.md, "Snapshots"): the reply says
    where the area is and what it kept; kmain's firings on both CPUs fill the flight recorder far past its ring, so
    each CPU's block keeps every packet it has room for. A session without an area, no session, a count past
    SDT_SNAPSHOT_MAX and a command without its name are refused, each in one error line."""
    symbols = {name: value for value, _, _, _, _, name in readelf_symbols(process)}
    hello = parse_reply("hello", text_lines(control(process, []))[0])[1]
    kmain = symbols["kmain"] + hello["entries"] - symbols["sdt_runtime_entries"]
    too_many = VALUES["SDT_SNAPSHOT_MAX"] + 1
    commands = [
        "session open flt 2000 400 1 0 3",  # 8 KiB rings of 1 KiB packets, overwrite, 3 packets kept a CPU
        "session open plain 2000 400 1",
        f"session open many 2000 400 1 0 {too_many:x}",
        "@flt enable branch hk:::",
        "snapshot flt",
        f"run all {kmain:x} 1 40",
        "snapshot flt",
        "snapshot plain",
        "snapshot nosuch",
        "snapshot",
    ]
    lines = replies(text_lines(control(process, commands)), commands)
    got = dict(zip(commands, lines, strict=False))

    def code(command: str) -> int:
        return int(got[command][-1].split()[1])

    assert got["session open flt 2000 400 1 0 3"][-1] == "ok session 1"
    assert code(f"session open many 2000 400 1 0 {too_many:x}") == VALUES["SDT_ERR_ARG"]
    first, second = lines[commands.index("snapshot flt")], lines[commands.index("snapshot flt", 5)]
    said = [parse_reply("snapshot", r[0])[1] for r in (first, second)]
    assert [parse_reply("", r[-1])[1]["count"] for r in (first, second)] == [0, CPUS * (3 + 1)]
    assert [s["taken"] for s in said] == [1, 2] and said[1]["lapped"] == said[1]["busy"] == 0
    assert (said[1]["id"], said[1]["packets"], said[1]["bytes"]) == (1, 3, VALUES["SDT_SNAPSHOT_HEAD"] + 4 * 0x400)
    assert said[0]["area"] == said[1]["area"] != 0
    assert code("snapshot plain") == VALUES["SDT_ERR_ARG"]
    assert code("snapshot nosuch") == VALUES["SDT_ERR_SESSION"]
    assert code("snapshot") == VALUES["SDT_ERR_USAGE"]
