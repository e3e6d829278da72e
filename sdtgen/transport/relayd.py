"""A trace streamed to lttng-relayd as the kernel runs, as LTTng's consumer streams its per-CPU buffers: one live
relay session a sink, named after the sdtgen session and hosted under the machine's name, a stream per CPU
(``kernel/cpu_N``) and the ``metadata`` stream; each packet sent with its index as it is consumed, and a beacon
every live period for a stream with nothing new, so that babeltrace2's lttng-live viewer shows the events within
a period of their packet reaching the host (docs/live.md).

The packets are exactly the ones CtfSink writes (ctf.trace_packet, and the same empty opening and closing packet a
stream), so the relay daemon's output directory is the trace a local --trace is. The kernel's consumer is never
held up by the relay daemon: packets go through a bounded queue to a thread of their own that alone talks to it;
a full queue, a daemon that goes away, refuses or stops reading loses packets to the relay's trace only (said
once, each counted, the total said when the trace ends), never to the session or its local trace.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from sdtgen.plaindata import record
from sdtgen.trace.ctf import empty_packet, metadata, starts_with_task, trace_packet
from sdtgen.trace.model import Lost, TraceMeta
from sdtgen.trace.packets import Event, Packet
from sdtgen.transport import relayd_wire as wire
from sdtgen.transport.relayd_client import RelaydClient, RelaydError, RelayUrl, connect_relayd, parse_relayd_url

LIVE_PERIOD = 1.0  # seconds: the relay session's live timer, and how often quiet streams are beaconed (lttng's)
QUEUE_BYTES = 64 << 20  # packets waiting for the relay daemon: past this, a packet is not sent (counted)
FINISH_WAIT = 30.0  # seconds the end of a trace waits for what is queued to reach the relay daemon
LINGER = 2  # live periods the end of a trace waits, beaconing, before its streams close (RelaydSink._close)
PATHNAME = "kernel"  # the trace's directory in the relay session (lttng's kernel domain)

__all__ = ["LIVE_PERIOD", "RelayUrl", "RelaydSink", "connect_relayd", "parse_relayd_url"]


@record
class _Stream:
    """What the sender knows of one CPU's relay stream."""

    handle: int
    next_seq: int = 0  # the next packet's net_seq_num (0: nothing sent yet, so beacons would be ignored)
    time: int = 0  # the latest time the stream has said: no event of it comes before
    quiet: bool = True  # nothing sent since the last live period


@record(frozen=True)
class _Out:
    """A packet on its way: its CPU, its bytes (content, then ``pad`` zeros the relay daemon appends), its header's
    fields the index repeats, and how many events it holds (what is counted when it is not sent)."""

    cpu: int
    content: bytes
    pad: int
    begin: int
    end: int
    discarded: int
    seq: int
    events: int


class _Queue:
    """Items for the sender, at most ``budget`` bytes of packets at once."""

    def __init__(self, budget: int) -> None:
        self.budget, self.held = budget, 0
        self.items: deque = deque()
        self.ready = threading.Condition()

    def put(self, item, size: int = 0) -> bool:
        """Queued, or False when its ``size`` bytes would pass the budget (the control items have none)."""
        with self.ready:
            if size and self.held + size > self.budget:
                return False
            self.held += size
            self.items.append((item, size))
            self.ready.notify()
            return True

    def get(self, timeout: float):
        """The next item, or None when none came within ``timeout`` seconds."""
        with self.ready:
            if not self.items and timeout > 0:
                self.ready.wait(timeout)
            if not self.items:
                return None
            item, size = self.items.popleft()
            self.held -= size
            return item

    def take_all(self) -> list:
        with self.ready:
            out = [item for item, _ in self.items]
            self.items.clear()
            self.held = 0
            return out


_END = object()  # the sender's last item: the streams closed, then the chunk


class RelaydSink:
    """The trace of ``meta``'s session streamed to the relay daemon at ``url`` (its text, or a client connect_relayd
    connected before the kernel started, so that a daemon that is not there was said then), as the relay session
    ``meta.session`` of host ``machine``. ``warn`` says what is lost, once. ``every_cpu``: ``meta.cpus`` is the
    kernel's own count, each CPU's stream made at once (a quiet one then opens when the session catches up, so
    a viewer goes on past it); else (a recording, whose kernel does not say how many it has) a CPU's stream is
    made with its first packet."""

    needs_events = False

    def __init__(self, url: str | RelaydClient, machine: str, meta: TraceMeta, bits: int, little: bool,
                 warn: Callable[[str], None], live_period: float = LIVE_PERIOD,
                 queue_bytes: int | None = None, every_cpu: bool = True) -> None:
        client = url if isinstance(url, RelaydClient) else connect_relayd(parse_relayd_url(url))
        self.client, self.machine, self.meta, self.bits, self.little = client, machine, meta, bits, little
        self.warn, self.period, self.every_cpu = warn, live_period, every_cpu
        self.url = client.url
        self.output: str | None = None  # the relay session's directory under the daemon's -o, once created
        self.gone: str | None = None  # why the relay daemon gets nothing more, once it went away or refused
        self.taken = self.unsent = self.unsent_events = 0  # packets given, and those (and their events) not sent
        # CtfSink learns whether the trace has the tid event context (a kernel with the task hook) from the
        # first event of the trace; the metadata says it and every packet's bytes depend on it, so until a packet
        # with an event comes the packets are held here, and nothing of the trace is sent.
        self.tasks: bool | None = None
        self._held: list[tuple[int, bytes, Packet]] = []
        self._held_bytes = 0
        self.last: dict[int, tuple[int, int, int]] = {}  # CPU -> (sequence number, end, discarded) of its last packet
        self._latest = 0  # the latest packet end given so far
        self._horizon = 0  # the latest packet end given before the last caught_up: see caught_up
        self._queue = _Queue(queue_bytes or QUEUE_BYTES)
        self._streams: dict[int, _Stream] = {}
        self._metadata: int | None = None
        self._lock = threading.Lock()
        self._said_gone = threading.Event()
        self._said_early = False
        if every_cpu:  # opened by the command's thread, so the session is there for a viewer when the sink is
            self._open()
        # A recording's sink opens on its line's first packet, on the thread that reads the line: the relay
        # session's round trips are the sender's, first, so a slow relay daemon never holds the line up.
        self._sender = threading.Thread(target=self._send_all, args=(not every_cpu,), name="sdtgen-relayd",
                                        daemon=True)
        self._sender.start()

    # -- the session's side: never blocks on the relay daemon ---------------------------------------
    def packet(self, cpu: int, data: bytes, packet: Packet, events: list[Event] | None) -> None:
        self.taken += 1
        self.last[cpu] = (packet.seq, packet.end, packet.discarded)
        self._latest = max(self._latest, packet.end)
        if self.gone is not None:
            self._count(packet.events)
            return
        if self.tasks is None:
            self.tasks = starts_with_task(data, packet, self.bits, self.little)
            if self.tasks is None:  # no event yet: held (its bytes, up to where its content ends)
                if self._held_bytes + packet.content > self._queue.budget:
                    self._count(packet.events)
                else:
                    self._held.append((cpu, bytes(data[:packet.content]), packet))
                    self._held_bytes += packet.content
                return
            self._release()
        self._put(cpu, data, packet)

    def _release(self) -> None:
        """Whether the trace has task context is known: the metadata saying it, then the packets held for it. The
        metadata is one batch, sent once, and starts with ``/* CTF 1.8 */``, which babeltrace2's lttng-live
        needs at the start of every batch of plain-text metadata."""
        self._queue.put(metadata(self.meta, self.bits, task_context=bool(self.tasks)).encode())
        held, self._held, self._held_bytes = self._held, [], 0
        for cpu, data, packet in held:
            self._put(cpu, data, packet)

    def _put(self, cpu: int, data: bytes, packet: Packet) -> None:
        pieces, pad = trace_packet(data, packet, self.bits, self.little, bool(self.tasks))
        # One piece of bytes that no one writes again (a packet read out of the ring is a copy): kept as it is,
        # not copied again; anything else (a view of memory the kernel reuses, a header rewritten) joined.
        whole = len(pieces) == 1 and (isinstance(pieces[0], bytes) or isinstance(data, bytes))
        content = pieces[0] if whole else b"".join(pieces)
        out = _Out(cpu, content, pad, packet.begin, packet.end, packet.discarded, packet.seq, packet.events)
        if not self._queue.put(out, len(content)):
            self._count(packet.events)

    def caught_up(self) -> None:
        """Every CPU's open packet was just closed and read (a flush on every CPU, then a drain). The packets given
        before the last such drain all closed before this flush began, so every CPU flushed after their latest
        end: an event a CPU records later comes after it, and one it recorded before is in a packet given by now.
        Every stream may then say it has no event before that end (the horizon), a live viewer's muxer going on
        up to it (docs/live.md, "Quiet CPUs"); the packets of this drain make the next horizon."""
        if self.tasks is not None and self.gone is None and self._horizon:
            self._queue.put(("horizon", self._horizon))
        self._horizon = self._latest

    def _count(self, events: int) -> None:
        with self._lock:
            self.unsent += 1
            self.unsent_events += events

    def finish(self, lost: dict[int, Lost]) -> None:
        """Each stream closed as CtfSink closes its files (an empty packet with the CPU's final discarded count),
        the streams and the trace chunk closed; what was not sent said. A relay daemon that does not take it all
        within FINISH_WAIT is left (the relay's trace ends where it got to): the session's own end is never held
        longer."""
        if self.tasks is None:
            self.tasks = False
            self._release()
        closing = {}
        for cpu in sorted(set(range(self.meta.cpus) if self.every_cpu else ()) | set(self.last)):
            seq, end, discarded = self.last.get(cpu, (0, 0, 0))
            closing[cpu] = (seq, end, max(discarded, lost[cpu].discarded if cpu in lost else 0))
        self._queue.put(("end", closing))
        wait = FINISH_WAIT
        self._sender.join(wait)
        if self._sender.is_alive():
            self._lose(f"it took not all of the trace within {wait:g} s")
            self.client.close()
            self._sender.join(self.client.timeout)
        self._drop_queued()
        if self.unsent:
            self.warn(f"the relay daemon at {self.url}: {self.unsent} of {self.taken} packets ({self.unsent_events} "
                      "events) were not sent: its trace lacks them" + (f" ({self.gone})" if self.gone else ""))

    def abort(self) -> None:
        """The session failed: the relay daemon left as it is (the streams end where they got to, as when a
        consumer dies), nothing more sent."""
        self.gone = self.gone or "the session ended"
        self._drop_queued()  # counted, not sent to a relay daemon the sender is about to leave
        self._queue.put(_END)
        self.client.close()
        self._sender.join(self.client.timeout)

    # -- the sender's side: the only one talking to the relay daemon -------------------------------------
    def _open_session(self) -> None:
        """The live session, its one trace chunk, the metadata stream and one a CPU, published (STREAMS_SENT): when
        the sink opens, before the sender starts and before anything is armed (each reply within its deadline)."""
        c = self.client
        _, self.output = c.create_session(self.meta.session, self.machine, int(self.period * 1_000_000))
        c.expect_ok(wire.CREATE_TRACE_CHUNK, wire.create_chunk(0, int(time.time())), "the trace chunk")
        self._metadata = c.add_stream("metadata", PATHNAME)
        for cpu in range(self.meta.cpus if self.every_cpu else 0):
            self._streams[cpu] = _Stream(c.add_stream(f"cpu_{cpu}", PATHNAME))
        c.expect_ok(wire.STREAMS_SENT, wire.request(wire.STREAMS_SENT))

    def _stream(self, cpu: int) -> _Stream:
        """``cpu``'s stream, made (and published to viewers) the first time a recording's CPU sends a packet."""
        st = self._streams.get(cpu)
        if st is None:
            st = self._streams[cpu] = _Stream(self.client.add_stream(f"cpu_{cpu}", PATHNAME))
            self.client.expect_ok(wire.STREAMS_SENT, wire.request(wire.STREAMS_SENT))
        return st

    def _open(self) -> None:
        try:
            self._open_session()
        except RelaydError as e:
            self._lose(f"{e}")

    def _send_all(self, open_first: bool = False) -> None:
        if open_first:
            self._open()
        tick = time.monotonic() + self.period
        while True:
            item = self._queue.get(tick - time.monotonic())
            if item is _END:
                return
            if self.gone is not None:
                if isinstance(item, tuple) and item[0] == "end":
                    return
                if isinstance(item, _Out):
                    self._count(item.events)
                continue
            try:
                if item is None or time.monotonic() >= tick:
                    self._beacons()
                    tick = time.monotonic() + self.period
                if item is None:
                    continue
                if isinstance(item, bytes):
                    self.client.send_control(wire.SEND_METADATA, wire.metadata(self._metadata, item))
                elif isinstance(item, _Out):
                    self._send(item)
                elif item[0] == "horizon":
                    self._horizon_reached(item[1])
                else:
                    self._close(item[1])
                    return
            except RelaydError as e:
                if isinstance(item, _Out):
                    self._count(item.events)
                if isinstance(item, tuple) and item[0] == "end":  # the close failed: nothing comes after it
                    self._lose(str(e), "while its streams were closed: the trace it stored may lack their ends")
                    return
                self._lose(str(e))  # what is queued after it is counted as it comes, up to the end

    def _send(self, out: _Out, counted: bool = True) -> None:
        """One packet: its bytes on the data socket, then its index (paired by net_seq_num) on the control one. A
        stream's first packet comes after an empty one, as CtfSink opens its files."""
        st = self._stream(out.cpu)
        if counted and st.next_seq == 0:
            self._send(self._empty(out.cpu, out.begin, 0, 0), counted=False)
        if out.begin < st.time and not self._said_early:  # a CPU that recorded while the flush ran (docs/live.md)
            self._said_early = True
            self.warn(f"the relay daemon at {self.url}: packet {out.seq} of CPU {out.cpu} begins before the time its "
                      "stream said it was quiet up to (it recorded while every CPU was flushed): a live viewer may "
                      "stop there")
        c = self.client
        c.send_data(wire.data_header(st.handle, st.next_seq, len(out.content), out.pad), out.content)
        size = (len(out.content) + out.pad) * 8
        c.expect_ok(wire.SEND_INDEX, wire.index(st.handle, st.next_seq, size, len(out.content) * 8, out.begin,
                                                out.end, out.discarded, self.meta.session_id, out.cpu, out.seq),
                    f"packet {out.seq} of CPU {out.cpu}'s index")
        st.next_seq += 1
        st.time = max(st.time, out.end)
        st.quiet = False

    def _empty(self, cpu: int, ts: int, seq: int, discarded: int) -> _Out:
        data = empty_packet(cpu, ts, seq, discarded, self.bits, self.little, self.meta.session_id)
        return _Out(cpu, data, 0, ts, ts, discarded, seq, 0)

    def _horizon_reached(self, ts: int) -> None:
        """Every CPU read up to ``ts``: a stream that never sent a packet opens now (its empty packet, at ``ts``),
        so that its beacons count (the relay daemon ignores a stream's beacons before its first index)."""
        for cpu, st in self._streams.items():
            if st.next_seq == 0 and ts:
                self._send(self._empty(cpu, ts, 0, 0), counted=False)
            st.time = max(st.time, ts)

    def _beacons(self) -> None:
        """Each stream that sent nothing this period says it has no event before its latest time (lttng's live
        timer's beacon), so a viewer's muxer goes on with the others."""
        for st in self._streams.values():
            if st.quiet and st.next_seq:
                self.client.expect_ok(wire.SEND_INDEX, wire.beacon(st.handle, st.next_seq - 1, st.time,
                                                                   self.meta.session_id), "a beacon")
            st.quiet = True

    def _close(self, closing: dict[int, tuple[int, int, int]]) -> None:
        """Each stream's closing packet; then, while a viewer may still be reading the last packets, LINGER live
        periods of beacons (babeltrace2 2.0's lttng-live drops the events it holds back when a session's streams
        close under it: the viewer must have read up to the end first); then the streams and the chunk closed."""
        # Every stream closes at the trace's latest time, not its own last end (CtfSink's): a viewer's muxer gives
        # out an event only once every stream has said it is past it, and what it still holds when the streams
        # close is lost to it.
        latest = max([st.time for st in self._streams.values()] + [e for _, e, _ in closing.values()] + [0])
        for cpu, (seq, _, discarded) in closing.items():
            st = self._stream(cpu)
            if st.next_seq == 0:  # a CPU that sent nothing: an empty stream, which a viewer then sees end
                self._send(self._empty(cpu, latest, 0, 0), counted=False)
            self._send(self._empty(cpu, latest, seq + 1, discarded), counted=False)
        for _ in range(LINGER):
            time.sleep(self.period)
            self._beacons()
        for handle, st in [(self._metadata, None), *((s.handle, s) for s in self._streams.values())]:
            last = st.next_seq - 1 if st is not None and st.next_seq else wire.NO_SEQ
            self.client.expect_ok(wire.CLOSE_STREAM, wire.close_stream(handle, last), "to close a stream")
        self.output = self.client.close_chunk() or self.output
        self.client.close()

    def _lose(self, why: str, then: str = "the run goes on, and what is not sent to it is counted") -> None:
        """The relay daemon gets nothing more: said once, and everything from now on counted."""
        self.gone = self.gone or why
        if not self._said_gone.is_set():
            self._said_gone.set()
            self.warn(f"the relay daemon at {self.url}: {why}: {then}")
        self.client.close()

    def _drop_queued(self) -> None:
        for item in self._queue.take_all():
            if isinstance(item, _Out):
                self._count(item.events)
