"""A kernel driven through its control core (sdtgen/runtime/sdt_control.c) over a byte channel.

Commands go to the kernel as text lines; everything comes back in frames of the serial transport
(sdtgen/transport/frames.py): text frames, one reply line each, and the runtime's packets, interleaved. A
command's reply is every text line up to the one that starts with ``ok`` or ``error``. Two kinds of
line may come at any time: ``report ...`` (the runtime's log) and ``panic ...`` (an exception outside
any call the kernel guards). The words are the one description's (sdtgen/layout.py WORDS, ERRORS).

The channel is whatever carries the bytes: QEMU's serial port on a pipe (sdtgen/targets/qemu.py), a
board's UART or a QEMU the user started (sdtgen/targets/serial.py), a process's standard input and
output (sdtgen/targets/process.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sdtgen.errors import SdtError, printable
from sdtgen.layout import ERRORS, REPLIES, VALUES, WORD, parse_reply, reply_shapes
from sdtgen.limits import MAX_CPUS  # a kernel's hello may say no more CPUs
from sdtgen.targets.base import (
    ARM_MODES,
    CLOCK,
    IDLE,
    MODULES,
    SESSIONS,
    Booted,
    CallFault,
    DamagedTables,
    Halted,
    Host,
    Interrupted,
    PacketFn,
    ProbeState,
    Refused,
    Returned,
    Rings,
    SessionState,
    Summary,
    TortureJob,
    snapshot_fix,
)
from sdtgen.trace.model import Lost
from sdtgen.trace.streams import clock_problem
from sdtgen.transport.consumer import events_in
from sdtgen.transport.frames import INFO, MAX_PAYLOAD, TABLES, TEXT, Console, FrameReader
from sdtgen.transport.packet_sink import PacketSink

if TYPE_CHECKING:  # modlink (and the ELF reader it needs) is imported when a module is placed
    from sdtgen.modlink import LinkedModule
    from sdtgen.targets.base import OwnSession

READ_CHUNK = 0x80  # bytes one `read` command asks for (the control core answers up to 0x80)
POLL_EVERY = 0.002  # seconds between two reads of rings the host reads in memory, while the kernel answers
# The longest a wait for the kernel's bytes blocks without Python running: a fleet's machine (sdtgen/session/fleet.py),
# on a thread of its own, hears the Ctrl-C its main thread raises in it only between two such waits.
WAKE = 0.25
PBYTES_CHUNK = 0x100  # bytes of a program one `pbytes` carries (its line stays under SDT_CONTROL_LINE)
MAX_TABLES = 2 * MAX_PAYLOAD  # bytes of a CPU's tables at most: a half's frame fits the frame reader's bound
MAX_CONSOLE = 4096  # bytes of a console line held before it is shown as it stands
# Before every command line: a kernel whose console is its shell's gives the line to the control core, not the
# shell (sdt_control_claims), and the core drops any partial line a stray byte left (docs/control.md)
ESCAPE = bytes([VALUES["SDT_CONTROL_ESCAPE"]])
MAX_LINE = VALUES["SDT_CONTROL_LINE"]  # bytes of a reply line at most: the control core writes none longer
TORTURE_FIRST = 5  # torture's first batch: 5 periods of toggles, timed to size the next
HELLO_WORDS = 1 + len(next(fields for command, _, fields in REPLIES if command == "hello"))  # the hello's words
STRAY_SAID = 8  # replies that answer no command sdtgen sent, said one by one before they are only counted
MAX_REPLY = 1 << 24  # bytes of one command's reply at most (a `list` of 16,000 probes fits): more is not an answer
# The commands a `@NAME` prefix makes act on session NAME (docs/sessions.md; layout.py's SDT_CTL_AT): the host's own
# session's, once it opened one. The others (run, read, mode, module, ...) are the kernel's, whoever asks.
SCOPED = frozenset(WORD[w] for w in ("enable", "disable", "penable", "pdisable", "drain", "stats", "tables", "switch",
                                     "take", "flush"))
AT = chr(VALUES["SDT_CTL_AT"])
POLICY_NAMES = {VALUES["SDT_DISCARD"]: "drop", VALUES["SDT_OVERWRITE"]: "overwrite"}  # --overflow's words


class ChannelClosed(Exception):
    """The channel's other end is gone (QEMU exited, the connection closed); the message says how."""


class Channel(Protocol):
    """Bytes to and from the kernel's control channel."""

    def write(self, data: bytes) -> None: ...

    def read(self, timeout: float) -> bytes | None:
        """What arrived within ``timeout`` seconds (None: nothing); ChannelClosed at its end."""
        ...

    def close(self) -> None: ...


class Timeout(Exception):
    """The kernel did not finish answering in time."""


class Panic(Exception):
    """The kernel stopped a CPU on an exception outside any call it guards: its ``panic`` line, and the line's
    fields as REPLIES reads them (None: a line of another shape, shown as it stands)."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        said = parse_reply("panic", line)
        self.fields = said[1] if said is not None else None


class ControlTarget:
    """The kernel at the other end of ``channel``, which has said (or is asked for) its hello."""

    capabilities = frozenset({MODULES, IDLE, SESSIONS, CLOCK})
    expects_modules = False  # QEMU given a module: its enablings arm it when it loads
    # The session the host opened for itself (--session), whose id its packets carry: every session-scoped command
    # acts on it; None: the default session's, id 0, as before sessions.
    own: OwnSession | None = None
    own_id = 0
    foreign = 0  # packets of another session than the host's that came to it: left out, counted, said once
    flushed_all = True  # every CPU's open packet closed by the last `flush` (Target.flushed_all)
    _said_undrained = False  # the kernel refused to drain the host's session: said once
    _reading: tuple[int, PacketFn] | None = None  # while read_session drains another session: its id, its taker
    # The module the host placed for the kernel's loader before it booted (QEMU's --module), or none: the one
    # `module load` may name (a kernel attached to was given none by this host).
    module: LinkedModule | None = None

    def __init__(self, host: Host, channel: Channel, *, timeout: float, announced: bool) -> None:
        self.host = host
        self.channel = channel
        self.timeout = timeout
        self.reader = FrameReader()
        self.packets = PacketSink([self._take_packet], self._packet_problem)
        self.bad_frames = 0  # frames of no type the host knows, text frames no reply is, info frames of a wrong size
        self._said_frames = False  # the first damaged frame was said: the others are counted
        self.stray_replies = 0  # replies that answered no command sdtgen was waiting on
        self._unflushed: set[int] = set()  # CPUs whose open packet `flush` could not close, said once each
        self._consumers: dict = {}  # session id -> the Consumer of its rings read through `read` (line_memory.py)
        self._tables: dict[int, tuple[int, int]] = {}  # CPU -> (its struct sdt_agg, the bytes of its tables)
        self._taken: list[bytes] = []  # SDT_FRAME_TABLES frames since the last `take` was sent (at most 2 kept)
        self._lines: list[str] = []
        self._console = b""
        self.halted = False
        self.bias = 0
        # Reads the rings where the kernel writes them (a target that maps the machine's memory), between
        # reads of the line and once a reply is whole; None: packets come on the line.
        self.poll: Callable[[], None] | None = None
        self.hello_words = self._hello(announced)
        self.booted = self._booted(self.hello_words)
        self.streams = host.open_streams(self.booted.clock_hz, self.booted.cpus, None)

    # -- the line ---------------------------------------------------------------------------------
    def _pump(self, deadline: float) -> None:
        """Read what the line carries within ``deadline`` (kept however much keeps arriving: Timeout once past)."""
        wait = deadline - time.monotonic()
        if wait <= 0:
            raise Timeout()
        if self.poll is not None:
            self.poll()
            wait = min(wait, POLL_EVERY)
        try:
            data = self.channel.read(min(wait, WAKE))
        except ChannelClosed as e:
            self.halted = True
            raise Halted(str(e)) from None
        if data is None:
            if time.monotonic() >= deadline:
                raise Timeout()
            return
        for item in self.reader.feed(data):
            if isinstance(item, Console):
                self._console_bytes(item.data)
            elif item.type == TEXT:
                line = item.payload.decode("utf-8", "replace")
                if len(item.payload) > MAX_LINE or "\n" in line:
                    self._bad_frame(f"a text frame of {len(item.payload)} bytes, which no line of the control core is")
                elif (head := line.partition(" ")[0]) == WORD["report"]:
                    said = parse_reply("report", line)
                    self.host.log(0, str(said[1]["text"]) if said is not None else "")
                elif head == WORD["panic"]:
                    self.halted = True
                    raise Panic(line)
                else:
                    self._lines.append(line)
            elif item.type == TABLES:
                self._taken = [*self._taken[-1:], item.payload]  # a take has one: more is damage, held no longer
            elif not self.packets.frame(item) and item.type != INFO:
                self._bad_frame(f"a frame of type {item.type:#04x}, which no frame of the serial transport has "
                                f"({len(item.payload)} bytes)")

    def _bad_frame(self, what: str) -> None:
        self.bad_frames += 1
        self._said_damage(what)

    def _packet_problem(self, what: str) -> None:
        """The packet sink counted a packet or verdict frame it could not use (PacketSink.on_problem)."""
        self._said_damage(what)

    def _said_damage(self, what: str) -> None:
        """The first damaged frame said, as it arrived; the rest counted (the session's `damaged`)."""
        if not self._said_frames:
            self._said_frames = True
            self.host.warning(f"the kernel's line carried {what}: left out (further damaged frames are "
                              "only counted)")

    def _stray_reply(self, line: str, named: str, sent: str) -> None:
        """A reply that answers another command than the one sent: left out. The first STRAY_SAID are said, the
        last of them saying that further ones are left out unsaid: a peer that keeps sending them fills no
        terminal, and the command's deadline still ends the wait."""
        self.stray_replies += 1
        if self.stray_replies <= STRAY_SAID:
            more = " (further such replies are left out unsaid)" if self.stray_replies == STRAY_SAID else ""
            self.host.warning(
                f"the kernel's reply {printable(line)!r} answers `{printable(named)}`, not `{printable(sent)}`, which "
                f"sdtgen sent: left out, and the reply to `{printable(sent)}` waited for{more}")

    def _console_bytes(self, data: bytes) -> None:
        """What the kernel printed outside frames (its own boot log, a firmware's banner): shown a line at a time,
        held at most MAX_CONSOLE bytes while its line is not done."""
        self._console += data
        *lines, rest = self._console.split(b"\n")
        if len(rest) > MAX_CONSOLE:
            lines.append(rest)
            rest = b""
        self._console = rest
        for line in lines:
            text = line.decode("utf-8", "replace").rstrip("\r")
            if text:
                self.host.console(text)

    def idle(self, seconds: float) -> None:
        """What the line carries while no command runs (a console waiting for its user), read for up to ``seconds``:
        packets, the kernel's log and console shown as they come. A reply line no command asked for is said and
        left out."""
        if self.halted:
            return
        try:
            self._pump(time.monotonic() + seconds)
        except Timeout:
            pass
        except Panic as e:
            self.halted = True
            raise Halted(f"the kernel stopped while no command ran: {printable(str(e))}") from None
        if self.poll is not None:
            self.poll()
        while self._lines:
            self.host.warning(f"the kernel said {printable(self._lines.pop(0))!r} while no command ran: "
                              "left out")

    def _line(self, deadline: float) -> str:
        while not self._lines:
            self._pump(deadline)
        return self._lines.pop(0)

    def _reply(self, deadline: float, name: str) -> list[str]:
        """One reply: its lines up to the ``ok`` or ``error`` line, at most MAX_REPLY bytes of them."""
        out: list[str] = []
        held = 0
        while True:
            out.append(self._line(deadline))
            if out[-1].split(" ", 1)[0] in (WORD["ok"], WORD["error"]):
                return out
            held += len(out[-1]) + 1
            if held > MAX_REPLY:
                self.halted = True
                raise Halted(f"the kernel's reply to `{printable(name)}` passed {MAX_REPLY:,} bytes in "
                             f"{len(out):,} lines without its ok or error line (the last: {printable(out[-1][:80])!r})",
                             fix="see the kernel's console: its control core does not answer so")

    def command(self, text: str, what: str, timeout: float | None = None, running: str | None = None) -> list[str]:
        """Send one command; its reply, the ``ok`` line last. An ``error`` reply raises Refused; a kernel that
        does not answer in time, panics or goes away raises Halted (``running``: the call a timeout ends)."""
        if self.halted:
            raise Halted(f"{what}: the kernel stopped answering earlier")
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        name = text.split(" ", 1)[0]
        if name.startswith(AT):  # `@NAME COMMAND`: a session named by the caller, its reply named by the command
            name = text.split(" ", 2)[1] if text.count(" ") else name
        elif self.own is not None and name in SCOPED:
            text = f"{AT}{self.own.name} {text}"
        try:
            self.channel.write(ESCAPE + text.encode("utf-8", "surrogateescape") + b"\n")
            while True:
                out = self._reply(deadline, name)
                named, code, why = answers(out[-1])
                if named != name:  # not this command's reply: one the kernel said unasked, or to a line not sdtgen's
                    if named != WORD["hello"]:  # a kernel announces itself at boot: its hello is no desync
                        self._stray_reply(out[-1], named, name)
                    continue
                if code is None:
                    if self.poll is not None:  # what the kernel closed before it answered (a run's packets)
                        self.poll()
                    return out
                raise Refused(code, why or ERRORS.get(code, f"error {code}"))
        except ChannelClosed as e:
            self.halted = True
            raise Halted(str(e)) from None
        except Timeout:
            self.halted = True
            if running is not None:
                raise Halted(f"{what}: did not return", CallFault(
                    f"did not return within {self.timeout if timeout is None else timeout:g} s", 0)) from None
            raise Halted(f"the kernel did not answer `{printable(text.split(' ', 1)[0])}` in time",
                         fix="give it longer with --timeout, or see the kernel's console for where it stopped"
                         ) from None
        except Panic as e:
            v = e.fields
            if v is None:
                raise Halted(f"a CPU stopped on an exception outside any call: {printable(str(e))}") from None
            pc = int(v["pc"])
            torn = " inside a probe site" if v["torn"] else ""
            raise Halted(f"CPU {v['cpu']} stopped on an exception outside any call: exception {int(v['cause']):x} at "
                         f"{pc:#x}{torn} ({self.host.image.symbolize(self._linked(pc))})") from None
        except KeyboardInterrupt as e:
            if isinstance(e, Interrupted):
                raise
            self.halted = True  # the command is still running: the kernel is left, not asked for more
            raise Interrupted(CallFault(f"interrupted ({e.args[0] if e.args else 'Ctrl-C'})", 0, True)) from None

    # -- hello ------------------------------------------------------------------------------------
    def _hello(self, announced: bool) -> list[str]:
        """The kernel's hello: said unasked at boot (QEMU), or asked for (a kernel already running)."""
        deadline = time.monotonic() + self.timeout
        try:
            if not announced:  # the escape first: a partial line the kernel's input held is dropped there
                self.channel.write(ESCAPE + f"{WORD['hello']}\n".encode())
            while True:
                line = self._line(deadline)
                words = line.split()
                if words and words[0] == WORD["hello"]:
                    break
                if words[:1] == [WORD["error"]] and answers(line)[0] == WORD["hello"]:
                    _, code, why = answers(line)
                    raise Halted(f"the kernel's control core refused hello: {printable(why or ERRORS.get(code, ''))}",
                                 fix="call sdt_control_init before the kernel takes lines for the control core")
                if words[:1] in ([WORD["ok"]], [WORD["error"]]):  # the reply to a line that was not sdtgen's
                    self.host.warning(
                        f"before its hello the kernel answered `{printable(answers(line)[0])}`, a line sdtgen did not "
                        f"send: {printable(line)!r}")
                else:  # the kernel's log framed as text before its control core announced itself (docs/control.md)
                    self.host.console(line)
            while self._line(deadline).split(" ", 1)[0] != WORD["ok"]:
                pass
            return words
        except Timeout:
            raise Halted("the kernel said no hello in time",
                         fix="link sdt_control.c, call sdt_control_init and sdt_control_announce, on the serial "
                         "port sdtgen reads (SDT_CONTROL_SERIAL), or give it longer with --timeout") from None
        except ChannelClosed as e:
            raise Halted(str(e)) from None
        except Panic as e:
            raise Halted(f"the kernel panicked while it booted: {printable(str(e))}") from None

    def _booted(self, words: list[str]) -> Booted:
        arch = self.host.image.arch
        said = parse_reply("hello", " ".join(words))
        v = said[1] if said is not None else {}
        version = v.get("version")
        if (said is not None or len(words) == HELLO_WORDS - 1) and version != VALUES["SDT_CONTROL_VERSION"]:
            # one word fewer: a hello from before it said its version (protocol 1)
            raise Halted(f"the kernel's control core speaks protocol {version or 1}, this sdtgen "
                         f"{VALUES['SDT_CONTROL_VERSION']}: {printable(' '.join(words))!r}",
                         fix="rebuild the kernel with this sdtgen's runtime (`sdtgen runtime-dir`), or drive it with "
                         "the sdtgen it was built with")
        if said is None:
            raise Halted(f"the kernel's hello is not the control core's ({reply_shapes('hello')}): "
                         f"{printable(' '.join(words))!r}")
        booted = Booted(v["arch"], v["cpus"], v["clock"], v["clock_hz"], v["patched"], v["refused"], v["folded"],
                        v["protocol"])
        if not 1 <= booted.cpus <= MAX_CPUS:
            raise Halted(f"the kernel's hello says it has {booted.cpus} CPUs, not 1 to {MAX_CPUS}: "
                         f"{printable(' '.join(words))!r}", fix="give sdt_control_ops.ncpus the kernel's CPUs")
        self.bias = self._bias(v["entries"])
        if booted.arch != arch.name:
            raise Halted(f"the kernel says it is {printable(booted.arch)}, the image is {arch.name}",
                         fix="give the image of the kernel that runs")
        problem = clock_problem(booted.clock_hz)
        if problem is not None or not booted.clock.isidentifier():
            why = problem or "a name no trace can give"
            raise Halted(f"the kernel says its clock is {printable(booted.clock)}, {why}",
                         fix="its platform must give sdt_hooks.clock_hz the clock's rate, and the control core an "
                         "identifier for its name")
        return booted

    def _bias(self, entries: int) -> int:
        """How far the running kernel is from its image's link addresses (a PIE process, a kernel with KASLR): where
        its sdt_runtime_entries is against where the image puts it. Added to every address sent, taken from every
        pc received."""
        image = self.host.image
        sec = image.elf.section("sdt_entries")
        sym = image.symbols.get("sdt_runtime_entries")
        linked = sec.addr if sec is not None and sec.is_alloc else sym.value if sym is not None else entries
        return (entries - linked) & ((1 << image.arch.bits) - 1)

    def _address(self, addr: int) -> int:
        return (addr + self.bias) & ((1 << self.host.image.arch.bits) - 1)

    def _linked(self, addr: int) -> int:
        return (addr - self.bias) & ((1 << self.host.image.arch.bits) - 1)

    @property
    def damaged(self) -> int:
        """Frames the line spoiled or the kernel sent wrong, and packets whose verdict never came."""
        return self.reader.corrupt + self.packets.stray + self.packets.damaged + self.bad_frames + self.foreign

    # -- packets --------------------------------------------------------------------------------
    def _take_packet(self, cpu: int, data: bytes, *seq: int) -> bool:
        """A closed packet of ``cpu``, handed to the host when its stream_id is the session this host reads (its own,
        or the default one): a packet of another session came where only this host's should (a line shared with
        another consumer, a kernel that sent the wrong ring), so it is left out, counted and said once."""
        if len(data) >= 8:
            stream = int.from_bytes(bytes(data[4:8]), "little" if self.host.image.arch.little else "big")
            if self._reading is not None and stream == self._reading[0]:
                return self._reading[1](cpu, data, *seq)
            if stream != self.own_id:
                self.foreign += 1
                if self.foreign == 1:
                    mine = f"session {self.own.name!r} (id {self.own_id})" if self.own else "the default session (id 0)"
                    self.host.warning(f"a packet of CPU {cpu} came from session id {stream}, not {mine}, which this "
                                      "host reads: left out (further ones are only counted)")
                return False
        return self.host.packet(cpu, data, *seq)

    # -- sessions (docs/sessions.md) ----------------------------------------------------------------
    def open_own(self, own: OwnSession) -> int:
        """`session open NAME BYTES PACKET POLICY [AGGBYTES]`: the host's own session beside the kernel's, its id;
        every session-scoped command acts on it from now on. Refused: the runtime's words, as one line."""
        policy = VALUES["SDT_OVERWRITE"] if own.policy == "overwrite" else VALUES["SDT_DISCARD"]
        tables = f" {own.tables:x}" if own.tables else ""
        try:
            line = self.command(f"{WORD['session']} {WORD['open']} {own.name} {own.ring:x} {own.packet:x} {policy:x}"
                                f"{tables}", "session open")[-1]
        except Refused as e:
            raise SdtError(self.host.image.path, f"the kernel refused to open session {printable(own.name)!r}: "
                           f"{printable(e.text)}", _OPEN_FIX.get(e.code, "see `sdtgen sessions` for the sessions "
                                                                          "it has")) from None
        self.own, self.own_id = own, _count(line)
        return self.own_id

    def close_own(self) -> None:
        """`session close NAME`: the host's own session closed, its memory the kernel's again (the kernel's other
        sessions record on); said when the kernel refuses. Nothing is scoped after it."""
        own, self.own = self.own, None
        self._consumers.pop(self.own_id, None)  # its id may be another session's next
        if own is None or self.halted:
            return
        try:
            self.command(f"{WORD['session']} {WORD['close']} {own.name}", "session close")
        except Refused as e:
            self.host.warning(f"the kernel refused to close session {printable(own.name)!r} ({printable(e.text)}): "
                              "it stays open, and its memory the runtime's")
        except Halted:
            pass

    def read_session(self, name: str, take: PacketFn) -> SessionState:
        """Session ``name``'s packets (another's than the host's own: the kernel's flight recorder, say), read by
        name: each CPU's open packet closed (`@NAME flush`) and every closed one drained (`@NAME drain`) into
        ``take``; the session as `sessions` said it before. Its packets are the only others taken meanwhile."""
        found = [s for s in self.sessions() if s.name == name]
        if not found:
            raise SdtError(self.host.image.path, f"the kernel has no session {printable(name)!r} open",
                           "see `sdtgen sessions` for those it has")
        self._reading = (found[0].id, take)
        try:
            self.command(f"{AT}{name} {WORD['flush']}", f"flush {printable(name)}")
            try:
                self.command(f"{AT}{name} {WORD['drain']}", f"drain {printable(name)}")
            except Refused as e:
                if e.code != VALUES["SDT_ERR_UNSUPPORTED"] or not self._in_memory(found[0].id, take):
                    raise SdtError(self.host.image.path, f"session {printable(name)!r} cannot be read: "
                                   f"{printable(e.text)}") from None
        finally:
            self._reading = None
        return found[0]

    def _in_memory(self, sid: int, take: PacketFn) -> bool:
        """Session ``sid``'s closed packets read where the kernel wrote them, through `read` (its control core does
        not send them on the line: sdtgen/transport/line_memory.py), each handed to ``take``. False, said, when the
        image has no registry or what the kernel's memory holds cannot be believed."""
        from sdtgen.transport.consumer import Consumer
        from sdtgen.transport.line_memory import LineMemory, SessionError, session_rings

        arch = self.host.image.arch
        try:
            consumer = self._consumers.get(sid)
            if consumer is None:
                sym = self.host.image.symbols.get("sdt_session_table")
                if sym is None:
                    raise SessionError("the image has no symbol sdt_session_table (the runtime's registry)")
                memory = LineMemory(self.read, arch.little)
                rings = session_rings(memory, self._address(sym.value), sid, self.booted.cpus, arch.bits)
                consumer = self._consumers[sid] = Consumer(memory, arch.bits, rings, take, self.streams)
            consumer.on_packet = take
            for k in range(len(consumer.rings)):
                consumer.consume(k)
        except SessionError as e:
            self.host.warning(f"session {sid}'s packets cannot be read in the kernel's memory: {e}")
            return False
        return True

    def take_snapshot(self, name: str) -> dict[str, int]:
        """`snapshot NAME`: session ``name``'s snapshot taken now (the host's trigger, docs/sessions.md "Snapshots");
        what the kernel said of it (`snapshot` line's fields, and ``kept``, the packets it kept)."""
        try:
            lines = self.command(f"{WORD['snapshot']} {name}", f"snapshot {printable(name)}")
        except Refused as e:
            raise SdtError(self.host.image.path, f"the kernel cannot snapshot session {printable(name)!r}: "
                           f"{printable(e.text)}", snapshot_fix(e.code)) from None
        said = parse_reply("snapshot", lines[0]) if len(lines) == 2 else None
        done = parse_reply("", lines[-1])
        if said is None or done is None:
            raise SdtError(self.host.image.path, f"the kernel's snapshot reply {printable(' / '.join(lines))!r} is not "
                           f"{reply_shapes('snapshot')}")
        return {**said[1], "kept": int(done[1]["count"])}

    def memory(self) -> Rings | None:
        """The kernel's memory through `read`, as a post-mortem reads a machine's (sdtgen/transport/line_memory.py):
        its registry where the image has one; None without it."""
        sym = self.host.image.symbols.get("sdt_session_table")
        if sym is None:
            return None

        def read(addr: int, size: int) -> bytes:
            data = self.read(addr, size)
            if data is None or len(data) != size:
                raise ValueError(f"the kernel has no {size} bytes to read at {addr:#x}")
            return data

        return Rings(read, registry=self._address(sym.value), kernel=lambda a: a)

    def sessions(self) -> list[SessionState]:
        """`sessions`: each session the kernel has open, the default one first; a line of another shape is said and
        left out."""
        out = []
        try:
            lines = self.command(WORD["sessions"], "sessions")
        except Refused as e:
            raise SdtError(self.host.image.path, f"the kernel cannot list its sessions: {printable(e.text)}",
                           _OPEN_FIX.get(e.code, "")) from None
        for line in lines[:-1]:
            said = parse_reply("sessions", line)
            if said is None:
                self.host.warning(f"the kernel's sessions line {printable(line)!r} is not {reply_shapes('sessions')}: "
                                  "left out")
                continue
            v = said[1]
            out.append(SessionState(v["id"], str(v["name"]), POLICY_NAMES.get(int(v["policy"]), str(v["policy"])),
                                    v["cpus"], v["ring"], v["packet"], v["packets"], v["discarded"], v["overwritten"],
                                    v["misplaced"], v["probes"]))
        return out

    # -- commands ---------------------------------------------------------------------------------
    def attach_rings(self, buffer_size: int, packet_size: int, overflow: str, memory: int) -> bool:
        """Every CPU's ring (`ring`); False when the kernel attached its own."""
        policy = VALUES["SDT_OVERWRITE"] if overflow == "overwrite" else VALUES["SDT_DISCARD"]
        try:
            self.command(f"{WORD['ring']} {buffer_size:x} {packet_size:x} {policy} {memory:x}", "ring")
        except Refused as e:
            if e.code in (VALUES["SDT_ERR_UNSUPPORTED"], VALUES["SDT_ERR_STATE"]):
                return False
            raise SdtError(self.host.image.path, f"the kernel cannot attach the rings: {printable(e.text)}",
                           "give a smaller --buffer-size, or the machine more memory") from None
        return True

    def enable(self, spec: str, mode: str) -> int:
        if mode not in ARM_MODES:
            raise ValueError(mode)
        return _count(self.command(f"{WORD['enable']} {WORD[mode]} {spec}", f"enable {printable(spec)}")[-1])

    def disable(self, spec: str) -> int:
        return _count(self.command(f"{WORD['disable']} {spec}", f"disable {printable(spec)}")[-1])

    def set_mode(self, mode: str) -> int:
        return _count(self.command(f"{WORD['mode']} {WORD[mode]}", f"arm with {mode}")[-1])

    def _words(self, args: list[int | str]) -> str:
        mask = (1 << self.host.image.arch.bits) - 1
        return " ".join(f"s:{a.encode('utf-8').hex()}" if isinstance(a, str) else f"{a & mask:x}" for a in args)

    def run(self, func: int, args: list[int | str], cpu: int | None, timeout: float) -> list[Returned]:
        """The call on ``cpu``, or on every CPU at once; its packets come before its results."""
        who = WORD["all"] if cpu is None else f"{cpu:x}"
        name = self.host.image.symbolize(func)
        lines = self.command(f"{WORD['run']} {who} {self._address(func):x} {len(args):x} {self._words(args)}".rstrip(),
                             printable(name), timeout=timeout, running=name)
        out = []
        asked = range(self.booted.cpus) if cpu is None else range(cpu, cpu + 1)
        for line in lines[:-1]:
            said = parse_reply("run", line)
            if said is None or said[1]["cpu"] not in asked:
                self.halted = True
                raise Halted(f"the kernel's reply to `run` holds {printable(line)!r}, not {reply_shapes('run')} of a "
                             f"CPU it was asked to run on ({_cpus(asked)})")
            word, v = said
            if word == "fault":
                out.append(Returned(v["cpu"], 0, CallFault(f"CPU exception {v['cause']:#x} (address {v['addr']:#x})",
                                                           self._linked(v["pc"]))))
            else:
                out.append(Returned(v["cpu"], v["value"]))
        if sorted(r.cpu for r in out) != list(asked):
            self.halted = True
            raise Halted(f"the kernel's reply to `run` has results of CPUs {sorted(r.cpu for r in out)}, not one of "
                         f"each CPU it was asked to run on ({_cpus(asked)})")
        return out

    def read(self, addr: int, size: int) -> bytes | None:
        out = bytearray()
        while len(out) < size:
            n = min(READ_CHUNK, size - len(out))
            try:
                lines = self.command(f"{WORD['read']} {addr + len(out):x} {n:x}", "read")
            except Refused:
                return None
            said = parse_reply("read", lines[0])
            if said is None or said[0] != "bytes":  # `fault`: no memory there
                return None
            try:
                out += bytes.fromhex(said[1]["hex"])
            except ValueError:
                return None
        return bytes(out[:size])

    def drain(self) -> None:
        """Every CPU's open packet closed (`flush`, on each CPU), then every closed packet read."""
        self._flush()
        try:
            self.command(WORD["drain"], "drain")
        except Refused as e:  # a kernel whose own consumer reads its rings refuses it for the default session
            if self.own is None:
                return
            if e.code == VALUES["SDT_ERR_UNSUPPORTED"] and self._in_memory(self.own_id, self._take_packet):
                return  # its packets are read where the kernel wrote them
            if not self._said_undrained:
                self._said_undrained = True
                self.host.warning(f"the kernel does not send session {printable(self.own.name)!r}'s packets on the "
                                  f"line ({printable(e.text)}): what it recorded is not read")

    def _flush(self) -> None:
        """`flush`: what each CPU recorded in its open packet, closed so it is read; a CPU whose packet stays open is
        said with the events it holds (once a CPU)."""
        self.flushed_all = False  # until the kernel said every CPU's open packet was closed
        try:
            lines = self.command(WORD["flush"], "flush")
        except Refused:  # a control core from before `flush`: each run's own packets are closed as it ends
            return
        self.flushed_all = len(lines) == 1
        for line in lines[:-1]:
            said = parse_reply("flush", line)
            if said is None or said[1]["cpu"] >= self.booted.cpus:
                self.host.warning(f"the kernel's flush line {printable(line)!r} is not "
                                  f"{reply_shapes('flush')} of one of its CPUs: left out")
                continue
            cpu, events = said[1]["cpu"], said[1]["events"]
            if cpu not in self._unflushed:
                self._unflushed.add(cpu)
                self.host.warning(
                    f"CPU {cpu}'s open packet could not be closed (the kernel runs no call on that CPU, or it was "
                    f"recording): the {events} events in it are not read")

    def clock(self) -> int:
        """`clock`: the kernel's clock read now (`ok clock TICKS`)."""
        return _count(self.command(WORD["clock"], "clock")[-1])

    def lost(self) -> dict[int, Lost]:
        """Each CPU's lost events so far: (discarded when its ring was full, overwritten unread)."""
        try:
            lines = self.command(WORD["stats"], "stats")
        except Refused:
            return {}
        out = {}
        for line in lines[:-1]:
            said = parse_reply("stats", line)
            if said is None or said[1]["cpu"] >= self.booted.cpus:
                self.host.warning(f"the kernel's stats line {printable(line)!r} is not "
                                  f"{reply_shapes('stats')} of one of its CPUs: left out")
                continue
            v = said[1]
            out[v["cpu"]] = Lost(v["discarded"], v["overwritten"])
        return out

    def probes(self, spec: str = "") -> list[ProbeState]:
        lines = self.command(f"{WORD['list']} {spec}".rstrip(), "list")
        out = []
        for line in lines[:-1]:
            said = parse_reply("list", line)
            if said is not None:
                v = said[1]
                out.append(ProbeState(v["key"], v["spec"], v["sites"], v["armed"]))
        return out

    # -- modules: the kernel's loader holds one (ops.module), which the host placed (self.module) -------------
    def load_module(self, path: str):
        """`module load`: the kernel's loader places its module and sdt_module_load takes it."""
        from sdtgen.modlink import module_probes
        from sdtgen.targets.base import LoadedModule

        linked = self.module
        if linked is None or os.path.abspath(path) != os.path.abspath(linked.path):
            raise SdtError(path, "is not the module this kernel was given at boot", "give it with --module")
        if self.bias:
            raise SdtError(path, "the kernel runs moved from its link address: the module was placed for it there",
                           "boot the kernel at its link address")
        n = _count(self.command(f"{WORD['module']} load", "module load")[-1])
        arch = self.host.image.arch
        return LoadedModule(linked.name, n, dict(linked.functions), module_probes(linked, arch.bits, arch.little))

    def unload_module(self, name: str) -> int:
        linked = self.module
        if linked is None or linked.name != name:
            raise SdtError("", f"no module {printable(name)!r} is loaded", "load it with --module FILE")
        return _count(self.command(f"{WORD['module']} unload", "module unload")[-1])

    def torture(self, job: TortureJob) -> Summary:
        """CPUs other than the one that takes commands call ``job.func`` while that one arms (``job.mode``) and
        disarms ``job.spec`` ``job.toggles`` times; the rings' records drained at the end. The toggles go in
        batches, each a `torture` command sized to take at most a quarter of the time left: when not one more fits,
        toggling stops and the summary says how many were made (timed out), as the emulator's torture does."""
        func, args, spec, toggles, mode = job.func, job.args, job.spec, job.toggles, job.mode
        deadline = time.monotonic() + job.timeout
        period = 3 if mode == "cycle" else 2  # a batch leaves every site (and a module) as it found them
        batch = min(toggles, TORTURE_FIRST * period)
        job.take()  # the keeping session holds its sites from before the first batch's reference call
        mine = [0]  # with a keeping session: the events of the default session's packets, the torture's own

        def count(cpu: int, data: bytes, *seq: int) -> bool:
            mine[0] += events_in(data, self.host.image.arch.bits, self.host.image.arch.little)
            return True

        if job.keep:  # those packets are not the host's session's: counted and let go
            self._reading = (0, count)
        try:
            summary = self._torture_batches(job, func, args, spec, toggles, mode, deadline, period, batch)
        finally:
            self._reading = None
        summary.firings += mine[0]
        return summary

    def _torture_batches(self, job: TortureJob, func: int, args: list[int], spec: str, toggles: int, mode: str,
                         deadline: float, period: int, batch: int) -> Summary:
        summary: Summary | None = None
        while True:
            started = time.monotonic()
            got = self._torture_batch(func, args, spec, batch, mode, deadline - started)
            if summary is None:
                summary = Summary(got.protocol, got.cpus, toggles)
            if job.keep:  # each batch's reference call, on the commanding CPU, fires the kept probes too
                summary.kept_calls += got.calls + 1
            summary.done += got.done
            summary.calls += got.calls
            summary.faults += got.faults
            summary.torn += got.torn
            summary.wrong += got.wrong
            summary.leaked += got.leaked
            summary.windows += got.windows
            job.progress(summary.done)
            if summary.done >= toggles:
                return summary
            now = time.monotonic()
            each = max(now - started, 1e-6) / max(batch, 1)  # seconds a toggle took, the batch's setup included
            # A quarter of the time left, and at most twice the last batch: a toggle's time varies with how the
            # host schedules the vCPUs, and a batch that overran the deadline would end the session unanswered.
            fits = min(int((deadline - now) / 4 / each), 2 * batch) // period * period
            if fits < period:
                summary.timed_out = True
                return summary
            batch = min(fits, toggles - summary.done)

    def _torture_batch(self, func: int, args: list[int], spec: str, toggles: int, mode: str,
                       timeout: float) -> Summary:
        lines = self.command(f"{WORD['torture']} {self._address(func):x} {len(args):x} {self._words(args)} "
                             f"{toggles:x} {WORD[mode]} {spec}", "torture", timeout=timeout)
        said = parse_reply("torture", lines[0])
        if said is None:
            raise Halted(f"the kernel's torture answer is not {reply_shapes('torture')}: {printable(lines[0])!r}")
        v = said[1]
        return Summary(v["protocol"], v["cpus"] - 1, toggles, done=v["toggles"], calls=v["calls"], faults=v["faults"],
                       torn=v["torn"], wrong=v["wrong"], leaked=v["leaked"], windows=v["windows"])

    # -- programs and their tables (docs/aggregations.md) ---------------------------------------------
    def attach_tables(self) -> None:
        """`tables`: every CPU's tables attached by the kernel, and where each is (believed only as it checks)."""
        lines = self.command(WORD["tables"], "tables")
        tables: dict[int, tuple[int, int]] = {}
        for line in lines[:-1]:
            said = parse_reply("tables", line)
            v = said[1] if said is not None else {}
            if (said is None or v["cpu"] >= self.booted.cpus
                    or not VALUES["SDT_AGG_MIN_BYTES"] <= v["bytes"] <= MAX_TABLES):
                raise SdtError(self.host.image.path, f"the kernel's line {printable(line)!r} is not "
                               f"{reply_shapes('tables')} of one of its CPUs with {VALUES['SDT_AGG_MIN_BYTES']} to "
                               f"{MAX_TABLES} bytes of tables", "give every CPU aggregation memory "
                               "(sdt_control_ops.agg_memory) of a size sdtgen reads")
            tables[v["cpu"]] = (v["agg"], v["bytes"])
        if sorted(tables) != list(range(self.booted.cpus)):
            raise SdtError(self.host.image.path, f"the kernel said where the tables of CPUs {sorted(tables)} are, "
                           f"not of each of its {self.booted.cpus}")
        self._tables = tables

    def load_program(self, code: bytes) -> int:
        """`program` reserves room, `pbytes` writes the code there a chunk a line."""
        at = _count(self.command(f"{WORD['program']} {len(code):x}", "program")[-1])
        for off in range(0, len(code), PBYTES_CHUNK):
            self.command(f"{WORD['pbytes']} {at + off:x} {code[off:off + PBYTES_CHUNK].hex()}", "pbytes")
        return at

    def enable_program(self, spec: str, mode: str, program: int, size: int) -> int:
        return _count(self.command(f"{WORD['penable']} {WORD[mode]} {program:x} {size:x} {spec}",
                                   f"enable {printable(spec)}")[-1])

    def disable_program(self, spec: str) -> int:
        return _count(self.command(f"{WORD['pdisable']} {spec}", f"disable {printable(spec)}")[-1])

    def take_tables(self) -> list:
        """`switch`, then `take` of each CPU: its frozen half in one frame, believed only as far as it checks."""
        if not self._tables:
            return []
        self.command(WORD["switch"], "switch")
        out = []
        for k, (addr, given) in sorted(self._tables.items()):
            self._taken = []
            self.command(f"{WORD['take']} {k:x}", "take")
            frames, self._taken = self._taken, []
            out.append(tables_of_frame(frames, k, addr, given, self.host.image.arch))
        return out

    def close(self) -> None:
        self.close_own()
        self.channel.close()


def tables_of_frame(frames: list[bytes], cpu: int, addr: int, given: int, arch):
    """CPU ``cpu``'s frozen half from the frames its `take` brought: one, its struct sdt_agg (at ``addr``, given
    ``given`` bytes of tables) then exactly the half's used bytes; CpuTables, or DamagedTables saying what is wrong."""
    from sdtgen.dscript.tables import AggTableError, read_cpu
    from sdtgen.layout import AGG

    if len(frames) != 1:
        return DamagedTables(cpu, f"{len(frames)} table frames came for one take")
    payload = frames[0]
    st = AGG.struct(arch.bits, arch.little)
    if len(payload) < st.size:
        return DamagedTables(cpu, f"its table frame of {len(payload)} bytes is shorter than a struct sdt_agg")
    head, body = payload[:st.size], payload[st.size:]
    raw = dict(zip(AGG.names(), st.unpack(head), strict=True))
    if raw["want"] not in (0, 1):
        return DamagedTables(cpu, f"its table says its CPU adds to half {raw['want']}, not 0 or 1")
    half = 1 - raw["want"]
    arena, used = raw[f"arena[{half}]"], raw[f"used[{half}]"]
    if len(body) != used:
        return DamagedTables(cpu, f"its table frame carries {len(body)} bytes of the half, its header says {used}")

    def read(a: int, n: int) -> bytes:
        if a == addr and n == st.size:
            return head
        if a == arena and n <= len(body):
            return body[:n]
        raise AggTableError(f"it would be read {n} bytes at {a:#x}, outside what its frame carries")

    try:
        tables = read_cpu(read, addr, arch.bits, arch.little, None, given)
    except AggTableError as e:
        return DamagedTables(cpu, str(e))
    return tables if tables.cpu == cpu else DamagedTables(cpu, f"its table says it is CPU {tables.cpu}'s")


def answers(line: str) -> tuple[str, int | None, str]:
    """(the command a reply's last line names, its error code or None for ``ok``, the error's text) of
    ``ok COMMAND N`` or ``error CODE COMMAND: TEXT``, read by sdtgen/layout.py's REPLIES. A last line of neither
    shape is the command's failure, said: its second word taken for the command it names."""
    said = parse_reply("", line)
    if said is None:
        named = line.split(" ")[1].removesuffix(":") if line.count(" ") else ""
        return named, VALUES["SDT_ERR_USAGE"], f"the kernel's last line {printable(line)!r} is not {reply_shapes('')}"
    word, v = said
    return str(v["command"]), None if word == "ok" else int(v["code"]), str(v.get("text", ""))


# What to do when the kernel refuses `session open`, by its code.
_OPEN_FIX = {
    VALUES["SDT_ERR_MEMORY"]: "give a smaller --buffer-size, or the kernel a larger session budget (session_memory)",
    VALUES["SDT_ERR_FULL"]: "close a session first (`sdtgen sessions` lists them)",
    VALUES["SDT_ERR_EXISTS"]: "give --session another name (`sdtgen sessions` lists those open)",
    VALUES["SDT_ERR_NAME"]: "give a name of 1 to 15 letters, digits, '_' or '-'",
    VALUES["SDT_ERR_UNSUPPORTED"]: "the kernel gives its control core no memory for sessions: give "
                                   "sdt_control_ops.session_memory (docs/sessions.md)",
    VALUES["SDT_ERR_UNKNOWN"]: "its control core has no sessions: rebuild the kernel with this sdtgen's runtime "
                               "(`sdtgen runtime-dir`), or leave out --session",
}


def _cpus(asked: range) -> str:
    return f"CPU {asked[0]}" if len(asked) == 1 else f"CPUs 0 to {asked[-1]}"


def _count(line: str) -> int:
    """The number an ``ok WHAT N`` line ends with (REPLIES' `ok COMMAND COUNT`)."""
    said = parse_reply("", line)
    return 0 if said is None else int(said[1].get("count", 0))
