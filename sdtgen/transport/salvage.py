"""Post-mortem: each CPU's ring read out of a dead, panicked or hung machine's memory, and nothing believed that
does not check.

The live consumer (sdtgen/transport/consumer.py) claims packets as the writer closes them; a crashed kernel closes
nothing more, and its runtime is not called again. So the host reads every CPU's struct sdt_cpu (sdtgen/layout.py's
CPU) and its ring as they stand: the closed packets the ring still holds, read before or not (a ring keeps its
newest ``packets`` packets: those from write_seq - packets to commit_seq - 1, the open packet's slot aside), and the
open packet (current, offset, events), whose events are walked one by one (each at the next multiple of 8, its
size its fields' at least) and cut at the first that does not parse, or at the one ``nesting`` says a recorder was
writing when the machine stopped. What is left of the open packet is closed as the writer would have (its end the
last event's time, its content the last event's end), so a trace reader reads it as any other.

Every packet then goes through the one reader of packets (sdtgen/trace/streams.py, sdtgen/trace/packets.py): its
magic, sizes, number against the slot it sits in, CPU, times against the packet before it, and events. A packet
that fails is not trusted: left out and counted, with why. Nothing here writes the machine's memory.
"""

from __future__ import annotations

from collections.abc import Callable

from sdtgen.layout import CPU, PACKET, SNAPSHOT, VALUES
from sdtgen.plaindata import factory, record
from sdtgen.targets.base import Rings
from sdtgen.trace.model import Lost
from sdtgen.trace.packets import MIN_PACKET, Decoder, Event, PacketError
from sdtgen.trace.streams import MAX_COUNT, Read, Streams

ReadFn = Callable[[int, int], bytes]  # (address, bytes): the machine's memory; ValueError where it has none
HostFn = Callable[[int], int]  # a kernel address as the host reads it; ValueError for one it cannot map
MAX_PACKET = 1 << 20  # the largest packet believed (the serial transport's bound): a larger one is damage
MAX_RING = 1 << 30  # the most bytes of one CPU's ring read: an area that says more is damage, not a ring to read


@record
class CpuSalvage:
    """What was read of one CPU: its packets, as the trace takes them, in order; its events; its counts."""

    cpu: int
    packets: list[tuple[bytes, Read]] = factory(list)
    cut: int = 0  # events of the open packet left out: in flight (nesting) or past the first that does not parse
    in_flight: bool = False  # a recorder was writing when the machine stopped (its event is among the cut)
    lost: Lost = factory(Lost)
    lapped: int = 0  # a snapshot's: packets the writer reused while they were copied, dropped by the runtime

    @property
    def events(self) -> list[Event]:
        return [e for _, r in self.packets for e in r.events or ()]


@record
class Salvage:
    """Every CPU's salvage; the packets (and areas) not trusted, and why."""

    cpus: dict[int, CpuSalvage] = factory(dict)
    distrusted: int = 0
    why: list[str] = factory(list)

    def lost(self) -> dict[int, Lost]:
        return {cpu: c.lost for cpu, c in sorted(self.cpus.items())}

    def summary(self) -> str:
        """One line: the events of each CPU, what was cut, and how many packets were not trusted."""
        parts = []
        for cpu, c in sorted(self.cpus.items()):
            n = len(c.events)
            part = f"CPU {cpu} {n} event" + ("s" if n != 1 else "")
            if c.cut:
                part += f" ({c.cut} cut from its open packet" + (", one in flight" if c.in_flight else "") + ")"
            if c.lapped:
                part += f" ({c.lapped} packet" + ("s" if c.lapped != 1 else "") + " lapped while copied, dropped)"
            parts.append(part)
        line = "; ".join(parts) if parts else "no CPU's ring could be read"
        if self.distrusted:
            line += f"; {self.distrusted} packet" + ("s" if self.distrusted != 1 else "") + " not trusted, left out"
        else:
            line += "; every packet checked"
        return line


def _pow2(n: int) -> bool:
    return n > 0 and not n & (n - 1)


class Salvager:
    """Reads rings out of the memory ``read`` gives, for the kernel whose packets ``decoder`` decodes."""

    def __init__(self, read: ReadFn, decoder: Decoder, clock_hz: int, cpus: int, bits: int, little: bool,
                 session: int = 0) -> None:
        self.read = read
        self.session = session  # the stream_id its packets carry: the session whose rings these are
        self.decoder = decoder
        self.bits, self.little = bits, little
        self.order = "little" if little else "big"
        self.cpu = CPU.struct(bits, little)
        self.cpu_names = CPU.names()
        self.packet = PACKET.struct(bits, little)
        self.offsets = PACKET.offsets(bits)
        self.result = Salvage()
        self.seqs: dict[int, int] = {}  # each snapshot block read: its seq (a snapshot's blocks have one)
        # The reader says the first damage of each CPU (the Salvage's ``why``) and counts the rest.
        self.streams = Streams(decoder, clock_hz, cpus, None, self._said_by_reader, MAX_PACKET)

    # -- what cannot be trusted -----------------------------------------------------------------------------
    def _distrust(self, why: str) -> None:
        self.result.distrusted += 1
        self.result.why.append(why)

    def _said_by_reader(self, what: str) -> None:
        self.result.why.append(what.split(" (further damage")[0])

    def _area(self, addr: int) -> dict[str, int] | None:
        try:
            raw = self.read(addr, self.cpu.size)
        except ValueError as e:
            self._distrust(f"the struct sdt_cpu at {addr:#x} cannot be read: {e}")
            return None
        return dict(zip(self.cpu_names, self.cpu.unpack(raw), strict=True))

    def _area_problem(self, addr: int, a: dict[str, int], cpu: int, host: HostFn | None) -> str | None:
        """What is wrong with an area, so that none of its ring is read; None when it can be."""
        if host is not None and _host(host, a["self"]) != addr:
            return f"its self field says {a['self']:#x}, which is not where it is"
        if a["cpu"] != cpu:
            return f"it says it is CPU {a['cpu']}'s"
        n, size = a["packets"], a["packet_size"]
        if not (_pow2(n) and n >= 2 and _pow2(size) and MIN_PACKET <= size <= MAX_PACKET and n * size <= MAX_RING):
            return f"it says {n} packets of {size} bytes"
        if a["ring"] & 7:
            return f"its ring at {a['ring']:#x} is not 8-byte aligned"
        w, c, r = a["write_seq"], a["commit_seq"], a["read_seq"]
        if not (r <= c <= w <= c + 1 and w <= MAX_COUNT):
            return f"{w} packets opened, {c} closed, {r} read"
        if a["current"] and (w == c or a["current"] != self._slot(a, w - 1)):
            return f"its open packet at {a['current']:#x} is not its slot of packet {w}"
        return None

    @staticmethod
    def _slot(a: dict[str, int], seq: int) -> int:
        """Where packet ``seq`` (from 0) sits, in the kernel's addresses."""
        return a["ring"] + (seq % a["packets"]) * a["packet_size"]

    # -- one CPU ------------------------------------------------------------------------------------------
    def cpu_ring(self, cpu: int, addr: int, ring: int | None, host: HostFn | None) -> CpuSalvage | None:
        """CPU ``cpu``'s ring, its area at ``addr`` and its packets at ``ring`` (None: where the area says, as
        ``host`` maps it): every packet it still holds that checks, then its open packet's events as far as they
        parse."""
        a = self._area(addr)
        if a is None:
            return None
        if ring is None and not a["ring"] and not a["packets"] and a["cpu"] == cpu:
            return None  # a CPU that said who it is and was given no ring: nothing recorded, nothing lost
        problem = self._area_problem(addr, a, cpu, host)
        if problem is not None:
            self._distrust(f"CPU {cpu}'s struct sdt_cpu at {addr:#x} is damaged: {problem}")
            return None
        if ring is None:
            ring = _host(host, a["ring"]) if host is not None else None
            if ring is None:
                self._distrust(f"CPU {cpu}'s ring at {a['ring']:#x} is not in memory the host can read")
                return None
        out = self.result.cpus[cpu] = CpuSalvage(cpu)
        w, c = a["write_seq"], a["commit_seq"]
        here = ring - a["ring"]  # the host's address of a byte of the ring, less the kernel's
        for seq in range(max(0, w - a["packets"]), c):
            self._take(out, self._bytes(self._slot(a, seq) + here, a["packet_size"]), seq + 1)
        if a["current"]:
            self._open(out, a, a["current"] + here)
        discarded = min(max(a["discarded"], self.streams.last_lost().get(cpu, Lost()).discarded), MAX_COUNT)
        out.lost = Lost(discarded, min(a["overwritten"], MAX_COUNT))
        return out

    def snapshot_cpu(self, cpu: int, addr: int, packets: int, size: int) -> CpuSalvage | None:
        """CPU ``cpu``'s block of a snapshot area at ``addr`` (room for ``packets`` packets of ``size`` bytes after its
        struct sdt_snapshot): each packet it kept, numbered one by one from its first_seq, through the one reader
        of packets. None when no snapshot was taken there; a head that does not check is said, and none of it read."""
        st = SNAPSHOT.struct(self.bits, self.little)
        try:
            h = dict(zip(SNAPSHOT.names(), st.unpack(self.read(addr, st.size)), strict=True))
        except ValueError as e:
            self._distrust(f"CPU {cpu}'s snapshot at {addr:#x} cannot be read: {e}")
            return None
        if h["magic"] != VALUES["SDT_SNAPSHOT_MAGIC"]:
            return None  # never taken: nothing kept, nothing lost
        problem = (f"it says it is CPU {h['cpu']}'s" if h["cpu"] != cpu else
                   "it was being written when read (its seq is odd)" if h["seq"] % 2 else
                   f"it says {h['packets']} packets, in room for {packets}" if h["packets"] > packets else
                   f"it says packet {h['first_seq'] + 1} first" if h["first_seq"] + h["packets"] > MAX_COUNT else
                   f"open {h['open']}, cut {h['cut']}" if h["open"] > 1 or h["cut"] > 1 else None)
        if problem is not None:
            self._distrust(f"CPU {cpu}'s snapshot at {addr:#x} is damaged: {problem}")
            return None
        head = VALUES["SDT_SNAPSHOT_HEAD"]
        data = [self._bytes(addr + head + k * size, size) for k in range(h["packets"])]
        try:  # a snapshot taken while the block was read (a kernel running on): its packets of two snapshots
            again = dict(zip(SNAPSHOT.names(), st.unpack(self.read(addr, st.size)), strict=True))
        except ValueError as e:
            again = {"seq": None, "why": e}
        if again["seq"] != h["seq"]:
            self._distrust(f"CPU {cpu}'s snapshot at {addr:#x} was written again while it was read (its seq "
                           f"{h['seq']}, then {again['seq']}): take it again")
            return None
        self.seqs[cpu] = h["seq"]
        out = self.result.cpus[cpu] = CpuSalvage(cpu, cut=h["cut"], in_flight=bool(h["cut"]),
                                                 lapped=min(h["lapped"], MAX_COUNT))
        for k, packet in enumerate(data):
            self._take(out, packet, h["first_seq"] + k + 1)
        out.lost = Lost(min(h["discarded"], MAX_COUNT), min(h["overwritten"], MAX_COUNT))
        return out

    def _bytes(self, addr: int, size: int) -> bytes | None:
        try:
            return self.read(addr, size)
        except ValueError:
            return None

    def _take(self, out: CpuSalvage, data: bytes | None, seq: int) -> bool:
        """One packet through the one reader of packets: kept when it checks, else counted with why. Its stream is
        its session's; the trace of one session holds one stream class, so it is written as stream 0."""
        if data is None:
            self._distrust(f"packet {seq} of CPU {out.cpu} cannot be read")
            return False
        if self.session and len(data) >= self.packet.size:
            stream = self.offsets["stream_id"]
            said = int.from_bytes(data[stream:stream + 4], self.order)
            if said != self.session:
                self._distrust(f"packet {seq} of CPU {out.cpu} says it is session {said}'s, in session "
                               f"{self.session}'s ring")
                return False
            data = self._stream0(data)
        read = self.streams.read(out.cpu, data, True, seq)  # a packet that fails is counted (and said) there
        if read is None:
            self.result.distrusted += 1
            return False
        out.packets.append((data[:read.packet.size], read))
        return True

    def _open(self, out: CpuSalvage, a: dict[str, int], at: int) -> None:
        """The open packet (at ``at``, the host's address)'s events, walked one by one and cut at the first that does
        not parse (or the one in flight), closed as a packet."""
        size = a["packet_size"]
        data = self._bytes(at, size)
        if data is None:
            self._distrust(f"the open packet of CPU {out.cpu} cannot be read")
            return
        ends = self.decoder.event_ends(data, min(a["offset"], size))
        walked = len(ends)
        claimed = a["events"]
        if a["nesting"] and ends and ends[-1] == a["offset"]:
            ends.pop()  # a recorder was writing it: its fields may be half stored
            out.in_flight = True
        # The longest run of events the packet reader takes (a string without its end, times out of order: cut).
        lo, hi, best = 0, len(ends), None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            packet = self._closed(data, a, ends[:mid])
            try:
                self.decoder.events(self._stream0(packet))  # whose stream it is, _take checks
                lo, best = mid, packet
            except PacketError:
                hi = mid - 1
        out.cut = max(claimed, walked) - lo
        if lo and best is not None:
            self._take(out, best, a["write_seq"])

    def _stream0(self, data: bytes) -> bytes:
        stream = self.offsets["stream_id"]
        return data[:stream] + bytes(4) + data[stream + 4:]

    def _closed(self, data: bytes, a: dict[str, int], ends: list[int]) -> bytes:
        """The open packet with its first ``len(ends)`` events, closed as close_packet closes one."""
        out = bytearray(data)
        o, order = self.offsets, self.order
        content = ends[-1] if ends else self.packet.size
        last = self.packet.size
        for end in ends[:-1]:
            last = (end + 7) & ~7
        begin = int.from_bytes(data[o["timestamp_begin"]:o["timestamp_begin"] + 8], order)
        stamp = int.from_bytes(data[last:last + 8], order) if ends else begin
        header_discarded = int.from_bytes(data[o["events_discarded"]:o["events_discarded"] + 8], order)
        for field, value, width in (("timestamp_end", max(begin, stamp), 8), ("content_size", content * 8, 8),
                                    ("events", len(ends), 4),
                                    ("events_discarded", max(header_discarded, min(a["discarded"], MAX_COUNT)), 8)):
            out[o[field]:o[field] + width] = value.to_bytes(width, order)
        return bytes(out)


def _host(host: HostFn, addr: int) -> int | None:
    try:
        return host(addr)
    except ValueError:
        return None


def salvage(rings: Rings, decoder: Decoder, clock_hz: int, bits: int, little: bool, session: int = 0) -> Salvage:
    """Every CPU's ring of one session, CPU k's struct sdt_cpu at ``rings.areas[k]`` (0: none), read out of the
    memory ``rings.read`` gives."""
    s = Salvager(rings.read, decoder, clock_hz, len(rings.areas), bits, little, session)
    given = rings.rings or (None,) * len(rings.areas)
    for cpu, (addr, ring) in enumerate(zip(rings.areas, given, strict=True)):
        if addr:
            s.cpu_ring(cpu, addr, ring, rings.host)
    return s.result


def snapshot(read: ReadFn, blocks: tuple[int, ...], packets: int, size: int, decoder: Decoder, clock_hz: int,
             bits: int, little: bool, session: int) -> Salvage:
    """The snapshot of session ``session`` (docs/sessions.md, "Snapshots"): CPU k's block at ``blocks[k]`` (the host's
    address), room for ``packets`` closed packets and the open one's, each ``size`` bytes, every packet checked as a
    post-mortem checks a ring's. CPUs with no snapshot taken are not in it."""
    s = Salvager(read, decoder, clock_hz, len(blocks), bits, little, session)
    for cpu, addr in enumerate(blocks):
        s.snapshot_cpu(cpu, addr, packets + 1, size)
    if len(set(s.seqs.values())) > 1:  # each snapshot writes every block once: blocks of one have one seq
        s._distrust("the CPUs' blocks are of different snapshots (seq " + ", ".join(
            f"CPU {cpu} {seq}" for cpu, seq in sorted(s.seqs.items())) + "): one was taken while it was read; "
            "take it again")
    return s.result
