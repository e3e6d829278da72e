"""A kernel that streams by itself (sdt_serial_drain on a line nobody commands): `sdtgen record`'s target.

Nothing is asked of it. Its frames are read as they come, until the line ends: text frames and console
bytes are shown as the kernel's lines, packets go to the session once their verdicts keep them, and the
info frame (sdt_serial_info, sent before the first packet) gives the clock the trace declares. The line
says neither how many CPUs the kernel has nor how large its packets are: CPU numbers up to MAX_CPUS and
packets up to the longest frame are taken, each CPU's first packet saying its packets' size
(sdtgen/trace/streams.py checks the rest). Nothing on the line is believed before it is checked.
"""

from __future__ import annotations

from collections.abc import Iterator

from sdtgen.errors import SdtError
from sdtgen.limits import MAX_CPUS  # CPU numbers a recording takes: 0 to MAX_CPUS - 1
from sdtgen.targets.base import LISTENS, Booted, Host
from sdtgen.trace.model import Lost
from sdtgen.trace.streams import clock_problem
from sdtgen.transport.frames import INFO, MAX_PACKET, TEXT, Console, Frame, FrameError, FrameReader, Info, info
from sdtgen.transport.packet_sink import PacketSink

DEFAULT_HZ = 1_000_000_000  # a clock rate for a kernel that never said its own


class ListenTarget:
    """The kernel whose bytes ``source`` yields; the clock known from its info frame, or its first packet on."""

    capabilities = frozenset({LISTENS})
    flushed_all = True  # a streaming kernel closes its packets itself; no command reaches it

    def __init__(self, host: Host, source: Iterator[bytes]) -> None:
        self.host = host
        self.source = iter(source)
        self.reader = FrameReader()
        self.packets = PacketSink([self._packet])
        self.stream: Info | None = None  # the kernel's info frame, once it came
        self.bad_frames = 0  # info frames of the wrong size, frames of no type sdtgen knows
        self.taken = 0  # packets that went to the session
        self.cpus: set[int] = set()
        self._held: list[Frame | Console] = []  # what came before the clock was known, taken once it is
        self._started = False
        self._first()
        arch = host.image.arch
        hz = DEFAULT_HZ if self.stream is None else self.stream.clock_hz
        if self.stream is None:
            host.warning(f"the kernel sent no info frame (sdt_serial_info): the trace's clock is taken to "
                                     f"count {DEFAULT_HZ:,} ticks a second")
        self.booted = Booted(arch.name, MAX_CPUS, arch.clock_name or "clock", hz, None, None, None, "")
        host.open_streams(hz, MAX_CPUS, None, MAX_PACKET)

    def _first(self) -> None:
        """Read until the info frame, the first packet or the line's end: the clock comes first. What came
        after it in the same read waits in ``_held`` for listen()."""
        for data in self.source:
            items = list(self.reader.feed(data))
            for k, item in enumerate(items):
                if isinstance(item, Frame) and item.type == INFO and self.stream is None:
                    self._info(item)
                    if self.stream is None:
                        continue
                elif isinstance(item, Frame) and item.type not in (TEXT, INFO):
                    self._held += items[k:]
                    return
                else:
                    self._take(item)
                    continue
                self._held += items[k + 1:]
                return
        self._held += self.reader.close()

    def listen(self) -> None:
        """The rest of the line, to its end (Ctrl-C, SIGTERM and SIGHUP raise KeyboardInterrupt meanwhile)."""
        self._started = True
        held, self._held = self._held, []
        for item in held:
            self._take(item)
        for data in self.source:
            for item in self.reader.feed(data):
                self._take(item)
        for item in self.reader.close():
            self._take(item)
        self.packets.close()

    def _packet(self, cpu: int, data: bytes) -> None:
        if self.host.packet(cpu, data):
            self.taken += 1
            self.cpus.add(cpu)

    def _take(self, item: Frame | Console) -> None:
        if isinstance(item, Console):
            for line in item.data.decode("utf-8", "replace").splitlines():
                self.host.line(line)
        elif item.type == TEXT:
            self.host.line(item.payload.decode("utf-8", "replace"))
        elif item.type == INFO:
            self._info(item)
        elif not self.packets.frame(item):
            self.bad_frames += 1

    def _info(self, item: Frame) -> None:
        path = self.host.image.path
        try:
            said = info(item)
        except FrameError:
            self.bad_frames += 1
            return
        if self.stream is not None and said != self.stream:
            raise SdtError(path, f"the kernel's info frame changed: a clock of {said.clock_hz} Hz and {said.bits}-bit "
                           f"words after {self.stream.clock_hz} Hz and {self.stream.bits}-bit",
                           "record one boot of one kernel at a time")
        if said.bits != self.host.image.arch.bits:
            raise SdtError(path, f"the kernel on the line has {said.bits}-bit words, the image "
                           f"{self.host.image.arch.bits}-bit ones", "give the image of the kernel that streams")
        problem = clock_problem(said.clock_hz)
        if problem is not None:
            raise SdtError(path, f"the kernel's info frame gives {problem}",
                           "give sdt_hooks.clock_hz its clock's rate before sdt_serial_info")
        if self._started and self.stream is None:
            raise SdtError(path, "the kernel's info frame came after its first packet",
                           "call sdt_serial_info before the first packet is drained")
        self.stream = said

    @property
    def damaged(self) -> int:
        """Frames damaged on the line or not what they say, and packets whose verdict never came."""
        return self.reader.corrupt + self.packets.stray + self.packets.damaged + self.bad_frames

    # -- what a recording does not ask of the kernel --------------------------------------------------
    def _listening(self, *args, **kwargs):
        raise SdtError("", "record only listens: the kernel streams by itself",
                       "drive a kernel with sdtgen attach (its control core) instead")

    enable = disable = set_mode = run = read = probes = torture = _listening

    def drain(self) -> None:
        """Nothing to ask: what the kernel sent has been read."""

    def lost(self) -> dict[int, Lost]:
        return {}  # the packets' own counts are all a recording has (the session keeps the last believed)

    def close(self) -> None:
        """The line is the caller's to close."""
