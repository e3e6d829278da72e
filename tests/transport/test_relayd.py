"""Streaming to lttng-relayd (docs/live.md): the fixture kernel as a Linux process (fixtures/process's kernel-proc)
streamed to Debian's real lttng-relayd while babeltrace2's lttng-live viewer reads it, against the native run of
the same C; and relay daemons that go away, refuse, answer garbage or stop reading, against which the run goes on
and its local trace stays whole."""

from __future__ import annotations

import io
import json
import re
import socket
import struct
import threading

import pytest
from post_mortem_read import bt2_rows
from relayd_daemon import HOST, Lines, LiveViewer, free_ports, relayd, wait_attached
from session_pair import CALLS, Firings, native

from sdtgen.errors import SdtError
from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session

CPUS = 2
MACHINE = "proc-a"


def opened(kernel_proc, out: io.StringIO, url: str, trace=None):
    return open_session("process", str(kernel_proc), Reporter(as_json=True, out=out), timeout=60, relayd=url,
                        machine=MACHINE, cpus=CPUS, trace=(str(trace), "ctf") if trace else None)


def run_calls(session, calls, cpu: int) -> None:
    for c in calls:
        session.run(c.function, list(c.args), cpu)


def firings_of(rows: list[dict], firings: Firings) -> list[tuple[int, tuple]]:
    """babeltrace2's events in its (time) order, the task events left out: (CPU, the native run's firing)."""
    return [(r["cpu"], firings(r["name"], list(r["fields"].values()))) for r in rows
            if "name" in r and r["name"] != "sdt:task"]


def streamed_live(kind: str, image, native_exe, tmp_path) -> None:
    """The calls on CPU 0, then again on CPU 1 (the native run makes them twice over, in that order), on a target
    of ``kind`` streaming to a real lttng-relayd. babeltrace2's lttng-live viewer, attached before any event
    fires, prints CPU 0's events while the session waits between commands (before CPU 1's calls are made, while
    CPU 1's stream says only that it is quiet: nothing drains but the live flush), then every event in time
    order; the relay daemon's stored trace, read offline, holds exactly the events of the native run, and exactly
    those of the local --trace written beside it."""
    with relayd(tmp_path) as daemon:
        out = io.StringIO()
        s = open_session(kind, str(image), Reporter(as_json=True, out=out), timeout=60, relayd=daemon.url,
                         machine=MACHINE, cpus=CPUS, trace=(str(tmp_path / "local"), "ctf"))
        try:
            firings = Firings(image, getattr(s.target, "bias", 0))
            viewer = LiveViewer(daemon.live_url(MACHINE, "default"))
            lines = Lines(viewer)
            wait_attached(daemon, MACHINE, "default", lines)
            s.enable(":::")
            run_calls(s, CALLS, 0)
            first = [(0, p) for p, _ in native(native_exe, CALLS)]
            assert lines.wait_for(first) == first, "the viewer did not show CPU 0's events while the session ran"
            run_calls(s, CALLS, 1)
            s.drain()
            s.finish_trace()
        finally:
            s.close()
        code, _, errors = viewer.wait()
        lines.thread.join()
        everything = native(native_exe, CALLS + CALLS)
        half = len(everything) // 2
        assert half > 20
        assert code == 0, errors[-2000:]
        assert lines.events() == [(0 if k < half else 1, p) for k, (p, _) in enumerate(everything)]
        [stored] = daemon.traces(MACHINE, "default")
    rows = bt2_rows(stored)
    assert firings_of(rows, firings) == [(0 if k < half else 1, f) for k, f in enumerate(everything)]
    assert rows[1:] == bt2_rows(tmp_path / "local")[1:]  # every event as the local trace has it (row 0: its env)
    assert warnings(out) == []


def test_a_process_streamed_to_lttng_relayd_is_shown_live_by_babeltrace2_and_stored_whole(kernel_proc, native_exe,
                                                                                          tmp_path):
    streamed_live("process", kernel_proc, native_exe, tmp_path)


def test_the_emulated_boot_streamed_is_shown_live_though_its_calls_leave_their_packets_open(kernel, native_exe,
                                                                                           tmp_path):
    """The emulator's runs leave each CPU's last packet open (a control core's close theirs): the live flush
    closes and reads them while the session waits, so the viewer shows them before the next command."""
    streamed_live("emulator", kernel.image, native_exe, tmp_path)


def test_a_qemu_guest_streamed_from_its_shared_ram_is_shown_live_and_stored_whole(native_exe, tmp_path_factory,
                                                                                  tmp_path):
    """QEMU (x86-64, 2 vCPUs) with the packets read in the machine's RAM as the kernel closes them: the same
    checks as the process target's."""
    from helpers import ROOT, SDTGEN, need_tool, run

    from sdtgen import arch as arches

    a = arches.by_name("x86_64")
    need_tool(a.qemu.binary, a.qemu.package)
    out = tmp_path_factory.mktemp("qemu-x86_64")
    run(["make", "-C", str(ROOT / "fixtures" / "qemu"), "ARCH=x86_64", f"O={out}", f"SDTGEN={SDTGEN}"])
    streamed_live("qemu", out / "kernel.elf", native_exe, tmp_path)


def test_a_relayd_url_takes_lttngs_ports_where_it_gives_none():
    """lttng-relayd(8): control port 5342, data port 5343 by default; net://HOST:CONTROL:DATA as lttng's URLs."""
    from sdtgen.transport.relayd_client import RelayUrl, parse_relayd_url

    assert parse_relayd_url("net://relay.lab") == RelayUrl("relay.lab", 5342, 5343)
    assert parse_relayd_url("net://10.0.0.7:6000") == RelayUrl("10.0.0.7", 6000, 5343)
    assert parse_relayd_url("net://10.0.0.7:6000:6001/") == RelayUrl("10.0.0.7", 6000, 6001)
    assert parse_relayd_url("net://[::1]:6000") == RelayUrl("::1", 6000, 5343)


def test_a_relayd_url_that_is_not_one_is_refused_in_one_line_before_anything_runs(kernel_proc):
    for url in ("tcp://127.0.0.1", "net://", "net://host:0", "net://host:70000", "net://a b"):
        with pytest.raises(SdtError, match=r"--relayd .* is not a relay daemon's address"):
            opened(kernel_proc, io.StringIO(), url)


def test_a_relay_daemon_that_is_not_there_is_said_in_one_line_before_the_kernel_starts(kernel_proc):
    control, data = free_ports(2)
    with pytest.raises(SdtError) as e:
        opened(kernel_proc, io.StringIO(), f"net://{HOST}:{control}:{data}")
    assert f"the relay daemon at net://{HOST}:{control}:{data}: cannot connect to its control port" in str(e.value)
    assert "\n" not in str(e.value)
    from sdtgen.trace.model import TraceMeta
    from sdtgen.transport.relayd import RelaydSink

    with pytest.raises(SdtError) as sink:  # a sink opened on its own, from the URL
        RelaydSink(f"net://{HOST}:{control}:{data}", MACHINE, TraceMeta("x86_64", "tsc", 1, 1, ()), 64, True, print)
    assert sink.value.what == e.value.what


def warnings(out: io.StringIO) -> list[str]:
    return [e["text"] for e in map(json.loads, out.getvalue().splitlines()) if e["event"] == "warning"]


def local_firings(trace, firings: Firings) -> list[tuple[str, list]]:
    return [f for _, f in firings_of(bt2_rows(trace), firings)]


def in_time(action, guard: float = 120):
    """``action`` run on a thread of its own, its result; a hang guard (a run the relay daemon held up never ends),
    not a time measured."""
    got: dict = {}

    def go() -> None:
        try:
            got["value"] = action()
        except BaseException as e:  # raised in the test's thread
            got["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(guard)
    assert not t.is_alive(), "the run was held up"
    if "error" in got:
        raise got["error"]
    return got.get("value")


def traced_run(kernel_proc, url: str, trace, between=lambda s: None) -> tuple[io.StringIO, Firings]:
    """The calls on CPU 0, ``between`` the session, the calls on CPU 1, the trace finished: (the session's output,
    its firings)."""
    out = io.StringIO()
    s = opened(kernel_proc, out, url, trace)
    try:
        firings = Firings(kernel_proc, s.target.bias)
        s.enable(":::")
        run_calls(s, CALLS, 0)
        s.drain()
        between(s)
        run_calls(s, CALLS, 1)
        s.drain()
        s.finish_trace()
    finally:
        s.close()
    return out, firings


def against(peer_answer, kernel_proc, tmp_path, guard: float = 120) -> tuple[str, list[str], Firings]:
    """traced_run against a peer answering as ``peer_answer`` does, within ``guard`` seconds (a run held up fails):
    the peer's URL, the warnings said, the firings."""
    peer = Peer(peer_answer)
    try:
        out, firings = in_time(lambda: traced_run(kernel_proc, peer.url, tmp_path / "local"), guard)
    finally:
        peer.close()
    return peer.url, warnings(out), firings


UNSENT = re.compile(r"the relay daemon at \S+: (\d+) of (\d+) packets \((\d+) events\) were not sent: its trace "
                    r"lacks them")


def test_a_relay_daemon_killed_mid_run_is_said_once_the_unsent_counted_and_the_local_trace_is_whole(
        kernel_proc, native_exe, tmp_path):
    with relayd(tmp_path) as daemon:
        out, firings = in_time(lambda: traced_run(kernel_proc, daemon.url, tmp_path / "local",
                                                  lambda s: daemon.kill()))
    said = warnings(out)
    assert len(said) == 2, said
    assert said[0].startswith(f"the relay daemon at {daemon.url}: ") and "the run goes on" in said[0]
    m = UNSENT.match(said[1])
    assert m and int(m[1]) > 0 and int(m[3]) > 0, said
    assert local_firings(tmp_path / "local", firings) == native(native_exe, CALLS + CALLS)


class Peer:
    """A loopback server on a control port and a data port that is no relay daemon: ``answer`` talks on each
    control connection (the peer under test), each data connection is accepted and never read."""

    def __init__(self, answer) -> None:
        self.answer, self.held, self.done = answer, [], threading.Event()
        self.control, self.data = socket.create_server((HOST, 0)), socket.create_server((HOST, 0))
        self.url = f"net://{HOST}:{self.control.getsockname()[1]}:{self.data.getsockname()[1]}"
        for server, talk in ((self.control, self._talk), (self.data, self.held.append)):
            threading.Thread(target=self._accept, args=(server, talk), daemon=True).start()

    def _accept(self, server: socket.socket, talk) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        self.held.append(conn)
        try:
            self.answer(conn)
        except OSError:
            pass
        finally:
            self.done.set()

    def close(self) -> None:
        for s in [self.control, self.data, *self.held]:
            s.close()


def recv_exactly(conn: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise OSError("closed")
        out += chunk
    return out


def handshake(conn: socket.socket, session_ret: int = 10, then=None) -> None:
    """lttng-relayd's answers as RELAYD.md's notes give them (big-endian, packed), up to STREAMS_SENT: VERSION
    2.13, the session (``session_ret``), the chunk, each stream; then ``then(conn)``."""
    handle = 100
    while True:
        _, size, cmd, _ = struct.unpack(">QQII", recv_exactly(conn, 24))
        recv_exactly(conn, size)
        if cmd == 5:
            conn.sendall(struct.pack(">II", 2, 13))
        elif cmd == 2:
            path = b"peer/s-20261205-000000\0"
            conn.sendall(struct.pack(">QII", 1, session_ret, len(path)) + path)
        elif cmd == 1:
            handle += 1
            conn.sendall(struct.pack(">QI", handle, 10))
        else:
            conn.sendall(struct.pack(">I", 10))
        if cmd == 16 and then is not None:
            then(conn)
            return


def never_answers(conn: socket.socket) -> None:
    conn.recv(64)
    threading.Event().wait(30)


@pytest.mark.parametrize(("answer", "said"), [
    (lambda conn: conn.close(), "it closed the connection "),
    (lambda conn: (conn.recv(64), conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")),
     "it answered `VERSION` with version 1213486160.791752241: it is no lttng-relayd"),
    (lambda conn: (conn.recv(64), conn.sendall(struct.pack(">II", 2, 4))), "it speaks protocol 2.4; sdtgen needs 2.11"),
    (never_answers, "it did not answer `VERSION` within 5 s"),
], ids=["closes", "garbage", "too-old", "silent"])
def test_a_peer_that_is_no_relay_daemon_is_said_in_one_line_before_the_kernel_starts(kernel_proc, answer, said):
    peer = Peer(answer)
    try:
        with pytest.raises(SdtError) as e:
            opened(kernel_proc, io.StringIO(), peer.url)
    finally:
        peer.close()
    assert e.value.what.startswith(f"the relay daemon at {peer.url}: {said}"), str(e.value)
    assert "\n" not in str(e.value)


def test_a_relay_daemon_that_refuses_the_session_is_said_once_and_the_run_goes_on(kernel_proc, native_exe, tmp_path):
    url, said, firings = against(lambda conn: handshake(conn, session_ret=25), kernel_proc, tmp_path)
    assert said[0] == (f"the relay daemon at {url}: it refused the session {MACHINE}/default (lttng error 25): "
                       "the run goes on, and what is not sent to it is counted")
    m = UNSENT.match(said[1])
    assert m and m[1] == m[2] and len(said) == 2, said  # nothing sent
    assert local_firings(tmp_path / "local", firings) == native(native_exe, CALLS + CALLS)


def test_a_relay_daemon_that_stops_reading_holds_nothing_up_and_what_it_did_not_take_is_counted(
        kernel_proc, native_exe, tmp_path, monkeypatch):
    """The peer takes the session and its streams, then reads nothing more on either socket, and the relay sink
    waits for its answer as long as the peer lets it (no reply deadline within the test): every call still returns
    while the sink waits, the end of the trace waits for the relay daemon no longer than FINISH_WAIT, the local
    trace is whole, and the packets are said as not sent."""
    from sdtgen.transport import relayd, relayd_client

    monkeypatch.setattr(relayd_client, "REPLY_TIMEOUT", 3600.0)
    monkeypatch.setattr(relayd, "FINISH_WAIT", 0.5)
    stopped, release = threading.Event(), threading.Event()
    peer = Peer(lambda conn: handshake(conn, then=lambda c: (stopped.set(), release.wait(3600))))
    said_before_the_end: list[str] = []
    try:
        def calls_made(s) -> None:  # between the two CPUs' calls: the sink still waits for its first answer
            said_before_the_end.extend(warnings(s.reporter.out))

        out, firings = in_time(lambda: traced_run(kernel_proc, peer.url, tmp_path / "local", calls_made))
    finally:
        release.set()
        peer.close()
    assert stopped.is_set() and said_before_the_end == []
    said = warnings(out)
    assert said[0] == (f"the relay daemon at {peer.url}: it took not all of the trace within 0.5 s: the run goes "
                       "on, and what is not sent to it is counted"), said
    m = UNSENT.match(said[1])
    assert m and int(m[1]) > 0 and int(m[3]) > 0 and len(said) == 2, said
    assert local_firings(tmp_path / "local", firings) == native(native_exe, CALLS + CALLS)


def test_boot_streams_to_the_relay_daemon_under_its_default_machine_name_what_its_local_trace_holds(kernel,
                                                                                                       tmp_path):
    """`sdtgen boot --relayd` without --name: the relay daemon's host directory is this host's name and the command,
    and its trace holds every event (and count) of the --trace written beside it."""
    from helpers import sdtgen

    machine = f"{re.sub(r'[^A-Za-z0-9_.-]', '_', socket.gethostname()).lstrip('.')}-boot"
    with relayd(tmp_path) as daemon:
        r = sdtgen("boot", kernel.image, "--cpus", "2", "--enable", ":::", "--run", "kmain", "--arg", "2", "--run",
                   "sched_run", "--arg", "30", "--relayd", daemon.url, "--trace", tmp_path / "local", "-q")
        assert r.returncode == 0, r.stderr
        [stored] = daemon.traces(machine, "default")
    rows, local = bt2_rows(stored), bt2_rows(tmp_path / "local")
    assert len(rows) > 100 and {r["cpu"] for r in rows if "cpu" in r} == {0, 1}
    assert rows[1:] == local[1:]


@pytest.mark.parametrize(("args", "said"), [
    (["--relayd", "tcp://127.0.0.1"], "--relayd 'tcp://127.0.0.1' is not a relay daemon's address"),
    (["--relayd", "net://127.0.0.1", "--name", "../up"], "--name '../up' has a character other than"),
    (["--name", "a" * 65], f"--name '{'a' * 65}' is 65 characters, more than 64"),
])
def test_boot_and_record_refuse_a_bad_relay_url_or_machine_name_in_one_line(kernel, tmp_path, args, said):
    from helpers import sdtgen

    for command in (["boot", kernel.image, "--run", "kmain", "--arg", "1"],
                    ["record", kernel.image, "--serial", tmp_path / "none", "--trace", tmp_path / "t"]):
        r = sdtgen(*command, *args)
        assert r.returncode != 0 and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr
        assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("budget", [1, 8 << 10], ids=["nothing-fits", "a-packet-or-two"])
def test_packets_that_do_not_fit_the_queue_are_counted_and_the_relay_daemon_holds_the_rest(
        kernel_proc, native_exe, tmp_path, monkeypatch, budget):
    """A queue of ``budget`` bytes in front of a real lttng-relayd: each packet that does not fit is not sent and
    counted with its events, so the events the relay daemon stored and those said as not sent are the native run's
    firings, each once (with a queue nothing fits in, all of them are said)."""
    from sdtgen.transport import relayd as sink

    monkeypatch.setattr(sink, "QUEUE_BYTES", budget)
    with relayd(tmp_path) as daemon:
        out, firings = in_time(lambda: traced_run(kernel_proc, daemon.url, tmp_path / "local"))
        [stored] = daemon.traces(MACHINE, "default")
    everything = native(native_exe, CALLS + CALLS)
    said = warnings(out)
    kept = [f for _, f in firings_of(bt2_rows(stored), firings)]
    m = UNSENT.match(said[0]) if said else None
    unsent_events = int(m[3]) if m else 0
    assert len(said) <= 1 and (m or not said), said
    assert len(kept) + unsent_events == len(everything)
    rest = iter(everything)
    assert all(f in rest for f in kept)  # what was stored is the native run's, in its order (a subsequence)
    if budget == 1:
        assert kept == [] and m and m[1] == m[2], said
    assert local_firings(tmp_path / "local", firings) == everything


def test_a_relay_daemon_that_refuses_a_packets_index_is_said_once_in_one_line_and_the_run_goes_on(
        kernel_proc, native_exe, tmp_path):
    """The peer takes the session, then answers every later command with LTTNG_ERR_UNK (11)."""
    def refuse_all(conn: socket.socket) -> None:
        while True:
            _, size, _, _ = struct.unpack(">QQII", recv_exactly(conn, 24))
            recv_exactly(conn, size)
            conn.sendall(struct.pack(">I", 11))

    url, said, firings = against(lambda conn: handshake(conn, then=refuse_all), kernel_proc, tmp_path)
    assert said[0] == (f"the relay daemon at {url}: it refused packet 0 of CPU 0's index (lttng error 11): the "
                       "run goes on, and what is not sent to it is counted"), said
    m = UNSENT.match(said[1])
    assert m and m[1] == m[2] and len(said) == 2, said
    assert local_firings(tmp_path / "local", firings) == native(native_exe, CALLS + CALLS)


def test_a_relay_daemon_that_goes_away_while_the_streams_close_ends_the_run_at_once_and_is_said(
        kernel_proc, native_exe, tmp_path, monkeypatch):
    """The peer takes the session, every packet and index, then closes its connection at the first CLOSE_STREAM:
    the sender stops there (the end of the trace does not wait out FINISH_WAIT for what never comes), the loss is
    said once as the streams' ends, and the local trace is whole."""
    from sdtgen.transport import relayd

    monkeypatch.setattr(relayd, "FINISH_WAIT", 3600.0)  # a sender that spins on would hold the end past the guard
    monkeypatch.setattr(relayd, "LINGER", 0)

    def until_close(conn: socket.socket) -> None:
        while True:
            _, size, cmd, _ = struct.unpack(">QQII", recv_exactly(conn, 24))
            recv_exactly(conn, size)
            if cmd == 7:  # CLOSE_STREAM
                conn.close()
                return
            if cmd != 6:  # SEND_METADATA has no reply
                conn.sendall(struct.pack(">I", 10))

    url, said, firings = against(lambda conn: handshake(conn, then=until_close), kernel_proc, tmp_path, guard=60)
    assert len(said) == 1 and said[0].startswith(f"the relay daemon at {url}: "), said
    assert said[0].endswith("while its streams were closed: the trace it stored may lack their ends"), said
    assert local_firings(tmp_path / "local", firings) == native(native_exe, CALLS + CALLS)


RECORDED = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(rc);
SDT_PROBE_DEFINE1(rc, , , tick, "long");
long kmain(long v) { SDT_PROBE1(rc, , , tick, v); return v; }
"""


def test_record_streams_what_a_kernel_sends_to_the_relay_daemon_a_stream_for_each_cpu_that_sends(tmp_path):
    """`sdtgen record --relayd` of a line carrying CPU 0's and CPU 5's packets (as sdt_serial_drain sends them,
    tests/serial_line.py) from a kernel that does not say how many CPUs it has: the relay daemon's trace holds
    the two CPUs' streams only, and every event of the local trace."""
    from helpers import build_c_kernel, sdtgen
    from serial_line import Packet, event, info

    from sdtgen.image import Image

    (tmp_path / "rc").mkdir()
    image = build_c_kernel(tmp_path / "rc", "x86_64", RECORDED, "rc")
    with Image(str(image)) as im:
        [key] = [p.key for p in im.probes() if p.spec == "rc:::tick"]
    packets = [Packet(cpu, seq, [event(t, key, (t,)) for t in range(begin + 1, begin + 4)], begin, begin + 9)
               for cpu, seq, begin in ((0, 1, 100), (5, 1, 105), (0, 2, 200), (5, 2, 210))]
    (tmp_path / "capture").write_bytes(info(1_000_000_000) + b"".join(p.sent() for p in packets))
    with relayd(tmp_path) as daemon:
        r = sdtgen("record", image, "--serial", tmp_path / "capture", "--trace", tmp_path / "local", "--relayd",
                   daemon.url, "--name", "rec-a")
        assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
        [stored] = daemon.traces("rec-a", "default")
    assert sorted(p.name for p in stored.iterdir()) == ["cpu_0", "cpu_5", "index", "metadata"]
    rows = bt2_rows(stored)
    sent = [(p.cpu, t, t) for p in packets for t in range(p.begin + 1, p.begin + 4)]  # each tick's argument: its time
    assert sorted((r["cpu"], r["ts"], r["fields"]["arg0"]) for r in rows if "name" in r) == sorted(sent)
    assert rows[1:] == bt2_rows(tmp_path / "local")[1:]


def test_a_recordings_relay_session_opens_off_the_line_so_a_slow_relay_daemon_holds_no_packet_up(tmp_path,
                                                                                                  monkeypatch):
    """A recording's relay sink opens with the line's first packet, on the thread that reads the line: a relay
    daemon slow to answer CREATE_SESSION must not stop that thread. The peer answers only once the line was read
    on past that packet (or gives up after a guard); the relay daemon then gets every packet all the same."""
    from helpers import build_c_kernel
    from serial_line import Packet, event, info

    from sdtgen.image import Image
    from sdtgen.targets import LISTEN
    from sdtgen.transport import relayd_client

    monkeypatch.setattr(relayd_client, "REPLY_TIMEOUT", 120.0)
    (tmp_path / "rc").mkdir()
    image = build_c_kernel(tmp_path / "rc", "x86_64", RECORDED, "rc")
    with Image(str(image)) as im:
        [key] = [p.key for p in im.probes() if p.spec == "rc:::tick"]
    packets = [Packet(0, seq, [event(t, key, (t,)) for t in range(begin + 1, begin + 4)], begin, begin + 9)
               for seq, begin in ((1, 100), (2, 200))]
    read_on, answered_after_read_on, got = threading.Event(), [], []

    def source():
        yield info(1_000_000_000) + packets[0].sent()
        read_on.set()  # the line's reader came back for more: the first packet did not hold it
        yield packets[1].sent()

    def slow(conn: socket.socket) -> None:
        while True:
            _, size, cmd, _ = struct.unpack(">QQII", recv_exactly(conn, 24))
            body = recv_exactly(conn, size)
            if cmd == 5:
                conn.sendall(struct.pack(">II", 2, 13))
            elif cmd == 2:
                answered_after_read_on.append(read_on.wait(60))
                path = b"peer/s-20261205-000000\0"
                conn.sendall(struct.pack(">QII", 1, 10, len(path)) + path)
            elif cmd == 1:
                conn.sendall(struct.pack(">QI", 100 + len(got), 10))
            elif cmd == 13:
                got.append(struct.unpack_from(">QQQ", body))
                conn.sendall(struct.pack(">I", 10))
            elif cmd == 20:  # CLOSE_TRACE_CHUNK: its path follows the code
                path = b"peer/s-20261205-000000\0"
                conn.sendall(struct.pack(">II", 10, len(path)) + path)
            elif cmd != 6:
                conn.sendall(struct.pack(">I", 10))

    peer = Peer(slow)
    out = io.StringIO()
    try:
        s = open_session(LISTEN, str(image), Reporter(as_json=True, out=out), trace=(str(tmp_path / "local"), "ctf"),
                         relayd=peer.url, machine="rec-b", source=source())
        try:
            s.listen()
            s.finish_trace()
        finally:
            s.close()
    finally:
        peer.close()
    assert answered_after_read_on == [True]
    assert warnings(out) == []
    assert len([g for g in got if g[2]]) == 4  # the indexes of the opening empty packet, both packets, the closing
