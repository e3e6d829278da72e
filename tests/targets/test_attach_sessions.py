"""`sdtgen attach --session NAME` on the line: the host opens a session of its own beside the kernel's (`session open`),
says `@NAME` before every session-scoped command, takes only packets whose stream_id is its session's, and closes it
when it leaves; `sdtgen sessions` lists what the kernel has open. The peer forges the kernel's side of the line
(tests/targets/forged_peer.py) as docs/sessions.md and layout.py's WORDS say it; the kernels' own sessions are run
for real in tests/targets/test_process_sessions.py and tests/qemu/test_qemu_sessions.py."""

from __future__ import annotations

import json
import subprocess

import pytest
from forged_peer import Peer, text, usual
from helpers import SDTGEN
from serial_line import Packet, event

from sdtgen.image import Image
from sdtgen.layout import VALUES
from sdtgen.transport.geometry import packet_size_for

SYS_TIMEOUT = 60
OPEN_ID = 3  # the id the forged kernel gives the host's session: its packets' stream_id
# `sessions` as a kernel with a flight recorder (id 1) and the host's session says it: the default one first
LISTING = ["session 0 default 0 2 100000 10000 2a 0 0 0 1",
           f"session 1 flight {VALUES['SDT_OVERWRITE']:x} 2 10000 1000 3e8 0 7 0 1",
           f"session {OPEN_ID:x} mine 0 2 100000 10000 0 0 0 0 1"]


@pytest.fixture
def image(kernel):
    return kernel.image


def probe_without_args(image) -> tuple[int, str]:
    return next((p.key, p.spec) for p in Image(str(image)).probes() if p.key and not p.args)


def answers(image, drained: bytes = b"") -> Peer:
    """A kernel whose runtime has sessions: `session open` gives OPEN_ID, `@NAME COMMAND` answers as COMMAND would,
    the first `@NAME drain` sends ``drained`` first."""
    plain = usual(image)
    pending = [drained]

    def answer(line: str) -> bytes | None:
        words = line.split()
        if words[0] == "session":
            return text(f"ok session {OPEN_ID:x}")
        if words[0] == "sessions":
            return b"".join(text(s) for s in LISTING) + text(f"ok sessions {len(LISTING):x}")
        if words[0].startswith("@"):
            command = words[1]
            sent = pending.pop() if command == "drain" and pending else b""
            return sent + plain.get(command, text(f"ok {command} 0"))
        return None

    return Peer(answer, plain)


def attach(peer: Peer, image, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([SDTGEN, "attach", "--serial", peer.line, str(image), "--timeout", "5", *args],
                              capture_output=True, text=True, timeout=SYS_TIMEOUT)
    finally:
        peer.close()


def test_the_host_opens_its_session_scopes_its_commands_to_it_and_closes_it_last(image):
    peer = answers(image)
    r = attach(peer, image, "--session", "mine", "--buffer-size", "65536", "--overflow", "overwrite",
               "--enable", "hk:vfs::", "--sessions")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    sent = [x for x in peer.seen if x]
    assert sent[0] == "hello"
    # each CPU's ring and packets as `ring` would give the default session's, the policy --overflow's
    assert sent[1] == f"session open mine 10000 {packet_size_for(65536):x} {VALUES['SDT_OVERWRITE']:x}"
    assert "ring" not in {x.split()[0] for x in sent}  # the default session's rings are the kernel's
    assert "@mine enable trap hk:vfs::" in sent and "@mine disable hk:vfs::" in sent
    assert {"@mine flush", "@mine drain"} <= set(sent)
    assert not [x for x in sent if x.split()[0] in ("enable", "disable", "drain", "flush", "stats")]  # all scoped
    assert sent[-1] == "session close mine"


def test_sessions_lists_what_the_kernel_says_it_has(image):
    peer = answers(image)
    try:
        r = subprocess.run([SDTGEN, "sessions", str(image), "--serial", peer.line, "--timeout", "5", "--json"],
                           capture_output=True, text=True, timeout=SYS_TIMEOUT)
    finally:
        peer.close()
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    got = [e for e in map(json.loads, r.stdout.splitlines()) if e["event"] == "session"]
    assert [(s["id"], s["name"], s["policy"], s["cpus"], s["ring"], s["packets"], s["overwritten"]) for s in got] == [
        (0, "default", "drop", 2, 0x100000, 0x2a, 0), (1, "flight", "overwrite", 2, 0x10000, 0x3e8, 7),
        (OPEN_ID, "mine", "drop", 2, 0x100000, 0, 0)]
    assert not {"session", "ring"} & {x.split()[0] for x in peer.seen if x}  # listing opens and sets up nothing


def test_a_packet_of_another_session_is_left_out_counted_and_said(image):
    """The host's session is id OPEN_ID: its packet is taken (its event shown), one of session 0 that comes on the
    same line is left out, said once, and the run fails as for any damaged frame."""
    key, spec = probe_without_args(image)
    mine = Packet(0, 1, [event(10, key)], 5, 20, stream=OPEN_ID).sent()
    theirs = Packet(0, 2, [event(30, key), event(31, key)], 25, 40, stream=0).sent()
    peer = answers(image, drained=mine + theirs)
    r = attach(peer, image, "--session", "mine", "--enable", spec, "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    fired = [json.loads(x) for x in r.stdout.splitlines() if json.loads(x).get("event") == "fire"]
    assert [(f["probe"], f["ts"]) for f in fired] == [(spec, 10)]
    said = [json.loads(x) for x in r.stdout.splitlines() if json.loads(x).get("event") == "warning"]
    assert [w["text"] for w in said] == [
        f"a packet of CPU 0 came from session id 0, not session 'mine' (id {OPEN_ID}), which this host reads: left "
        "out (further ones are only counted)"]
    assert json.loads(r.stdout.splitlines()[-1])["damaged"] == 1


def traced_session(image, path, fmt: str) -> tuple[str, subprocess.CompletedProcess]:
    """An attach with --session mine tracing to ``path``: its one packet (stream_id OPEN_ID) in the trace."""
    key, spec = probe_without_args(image)
    peer = answers(image, drained=Packet(0, 1, [event(10, key), event(12, key)], 5, 20, stream=OPEN_ID).sent())
    r = attach(peer, image, "--session", "mine", "--enable", spec, "--trace", str(path), "--trace-format", fmt, "-q")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    return spec, r


def test_babeltrace2_reads_a_sessions_trace_and_its_environment_names_the_session(image, tmp_path):
    """The packets keep their stream_id (the session's id) as they stand: the metadata declares that stream, so the
    reference reader reads every event, and its environment says which session they come from."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "trace"))
    from test_ctf import read_bt2

    spec, _ = traced_session(image, tmp_path / "trace", "ctf")
    read = read_bt2(tmp_path / "trace")
    assert read[0]["trace"]["session"] == "mine"
    assert [(e["name"], e["ts"]) for e in read[1:]] == [(spec, 10), (spec, 12)]


def test_perfetto_names_each_cpus_track_with_its_session(image, tmp_path):
    from helpers import need_module

    pb = need_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "pip install 'sdtgen[perfetto]'")
    traced_session(image, tmp_path / "t.pftrace", "perfetto")
    trace = pb.Trace()
    trace.ParseFromString((tmp_path / "t.pftrace").read_bytes())
    names = [p.track_descriptor.name for p in trace.packet if p.HasField("track_descriptor")]
    assert names == ["CPU 0 (session mine)"]


def test_chromes_process_name_says_the_session(image, tmp_path):
    traced_session(image, tmp_path / "t.json", "chrome")
    trace = json.loads((tmp_path / "t.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    [named] = [e["args"]["name"] for e in events if e.get("name") == "process_name"]
    assert named.endswith(", session mine"), named


@pytest.mark.parametrize("name", ["default", "has space", "x" * 16, ""])
def test_a_session_name_the_runtime_would_refuse_is_refused_before_the_kernel_is_asked(image, name):
    peer = answers(image)
    r = attach(peer, image, "--session", name, "--enable", "hk:vfs::")
    assert r.returncode == 2 and peer.seen == []
    assert r.stderr.startswith(f"sdtgen: error: --session '{name}' is not a session name the runtime takes"), r.stderr
