"""Sessions in the emulated boot (docs/sessions.md): opened, used and closed through the runtime's sdt_entries.

The emulator is the kernel here, so it gives what a kernel gives sdt_session_open: storage for each session's
struct sdt_session and configuration, and memory the runtime carves the session's areas, tables and rings from
(the platform's pool, handed out first-fit: a request the pool cannot hold is given the largest free piece,
and the runtime refuses it with SDT_ERR_MEMORY, as a kernel's budget refuses it). Every call is the runtime's
own (sdt_session_open, _enable, _disable, _enable_program, _disable_program, _switch, _flush, _close) on CPU 0,
or on each CPU for a flush; a session's packets are read where the runtime writes them, its rings found through
the runtime's registry (sdt_session_table), and its listing is what the registry and the probes' slots say.
"""

from __future__ import annotations

from collections.abc import Callable

from sdtgen.errors import SdtError, printable
from sdtgen.layout import CPU, ERRORS, REGISTRY, SESSION, SLOT, VALUES
from sdtgen.plaindata import record
from sdtgen.targets.base import Refused, SessionState
from sdtgen.targets.emulator.machine import GuestFault
from sdtgen.trace.streams import Streams
from sdtgen.transport.consumer import Consumer, StoppedMemory
from sdtgen.transport.line_memory import SessionError, session_rings
from sdtgen.transport.registry import find_sessions

POLICY = {"drop": VALUES["SDT_DISCARD"], "overwrite": VALUES["SDT_OVERWRITE"]}
POLICY_NAMES = {v: k for k, v in POLICY.items()}


@record
class Opened:
    """A session the emulator opened: its id, name, struct sdt_session, the pool's piece it was given, and the
    consumer of its rings (made when it is first read)."""

    id: int
    name: str
    struct: int
    memory: tuple[int, int]  # (0, 0): a session the kernel opened in memory of its own
    slot: int = 0  # the platform's storage it has (0: none, the kernel's own)
    consumer: Consumer | None = None


class Pool:
    """The platform's session memory, handed out first-fit in 64-byte pieces and taken back on close."""

    def __init__(self, base: int, size: int) -> None:
        self.free: list[tuple[int, int]] = [(base, size)]

    def fit(self, need: int) -> tuple[int, int]:
        """A free piece of ``need`` bytes; when none is that large, the largest there is (the runtime refuses it)."""
        need = (need + 63) & ~63
        for at, size in self.free:
            if size >= need > 0:
                return at, need
        return max(self.free, key=lambda f: f[1], default=(0, 0))

    def take(self, piece: tuple[int, int]) -> None:
        """``piece`` (from fit) is the session's: cut out of the free piece that holds it."""
        at, n = piece
        out = []
        for a, size in self.free:
            if a <= at < a + size:
                out += [(a, at - a), (at + n, a + size - at - n)]
            else:
                out.append((a, size))
        self.free = [f for f in out if f[1] > 0]

    def give(self, piece: tuple[int, int]) -> None:
        if piece[1]:
            self.free = _joined(sorted([*self.free, piece]))


class Sessions:
    """The sessions of an emulated boot (``target``, an EmulatorTarget): those the emulator opens as the kernel's
    platform (``opened``) and those the kernel's own code opened, found by name in the registry (``kernels``)."""

    def __init__(self, target) -> None:
        self.t = target
        self.platform = target.platform
        self.arch = target.image.arch
        self.pool = Pool(*self.platform.session_pool())
        self.opened: dict[int, Opened] = {}  # the sessions the emulator opened, by id
        self.kernels: dict[int, Opened] = {}  # the sessions the kernel opened itself, as the registry said
        self.memory = StoppedMemory(target.machine, self.arch.little)

    # -- calls ----------------------------------------------------------------------------------------
    def call(self, entry: str, args: list[int], cpu: int = 0) -> int:
        """Runtime entry ``entry`` on CPU ``cpu``: its result (Refused: a negative one, the runtime's error)."""
        from sdtgen.targets.base import Interrupted
        from sdtgen.targets.emulator.machine import Interrupted as MachineInterrupted
        from sdtgen.targets.emulator.target import fault_of

        try:
            r = self.t.runtime.call(self.t.smp.cpus[cpu], entry, args)
        except MachineInterrupted as e:
            raise Interrupted(fault_of(e)) from None
        if r < 0:
            raise Refused(r, ERRORS.get(r, f"error {r}"))
        return r

    def named(self, name: str) -> Opened:
        """Session ``name``: one the emulator opened, or one the kernel opened itself (found in the registry)."""
        for s in self.opened.values():
            if s.name == name:
                return s
        for sid, at in self._registry().items():
            try:
                st = self._session_at(at)
            except GuestFault:  # an address no memory holds: a damaged registry, not the session asked for
                continue
            if sid not in self.opened and _name(st) == name:
                known = self.kernels.get(sid)
                if known is None or known.struct != at or known.name != name:
                    known = self.kernels[sid] = Opened(sid, name, at, (0, 0))
                return known
        raise SdtError(self.t.image.path, f"the runtime has no session {printable(name)!r} open",
                       "see --sessions for the sessions it has")

    def get(self, sid: int) -> Opened:
        return self.opened[sid] if sid in self.opened else self.kernels[sid]

    def _registry(self) -> dict[int, int]:
        """The address of each open session's struct sdt_session, by id, as sdt_session_table says."""
        table = self._table()
        off, bits = REGISTRY.offset("sessions", self.arch.bits), self.arch.bits
        out = {}
        for sid in range(VALUES["SDT_MAX_SESSIONS"]):
            at = self.memory.load(table + off + 8 * sid, 8) & ((1 << bits) - 1)
            if at:
                out[sid] = at
        return out

    def _table(self) -> int:
        table = self.t.image.symbols.get("sdt_session_table")
        if table is None:
            raise SdtError(self.t.image.path, "the image has no symbol sdt_session_table (the runtime's registry of "
                           "sessions)", "link this sdtgen's runtime, with its symbols")
        return table.value

    # -- open, close --------------------------------------------------------------------------------------
    def open(self, name: str, ring: int, packet: int, policy: str, tables: int) -> int:
        """sdt_session_open with every CPU of the boot: the session's id (Refused: the runtime's error)."""
        used = {o.slot for o in self.opened.values()}
        slot = next((k for k in range(1, VALUES["SDT_MAX_SESSIONS"]) if k not in used), 0)
        if not slot:
            raise Refused(VALUES["SDT_ERR_FULL"], ERRORS[VALUES["SDT_ERR_FULL"]])
        struct, config, text = self.platform.session_slot(slot)
        m = self.t.machine
        m.write(config, self.platform.config_bytes({"ncpus": self.t.cpus, "policy": POLICY[policy], "ring_bytes": ring,
                                                    "packet_size": packet, "agg_bytes": tables,
                                                    "snapshot_packets": 0}))
        need = self.call("sdt_session_bytes", [config]) & ((1 << self.arch.bits) - 1)
        piece = self.pool.fit(need)
        data = name.encode("ascii", "replace")[:31]
        m.write(text, data + b"\0")
        got = self.call("sdt_session_open", [struct, text, config, piece[0], piece[1]])
        self.pool.take(piece)
        self.opened[got] = Opened(got, name, struct, piece, slot)
        return got

    def close(self, sid: int) -> int:
        """sdt_session_close: the sites it alone kept disarmed; its memory the pool's again."""
        s = self.opened.pop(sid)
        n = self.call("sdt_session_close", [s.struct])  # a fault or refusal: the runtime may still hold the memory
        self.pool.give(s.memory)
        return n

    # -- what a session does ------------------------------------------------------------------------------
    def enable(self, sid: int, spec: int, mode: int) -> int:
        return self.call("sdt_session_enable", [self.opened[sid].struct, spec, mode])

    def disable(self, sid: int, spec: int) -> int:
        return self.call("sdt_session_disable", [self.opened[sid].struct, spec])

    def enable_program(self, sid: int, spec: int, mode: int, program: int, size: int) -> int:
        return self.call("sdt_session_enable_program", [self.opened[sid].struct, spec, mode, program, size])

    def disable_program(self, sid: int, spec: int) -> int:
        return self.call("sdt_session_disable_program", [self.opened[sid].struct, spec])

    def switch(self, sid: int) -> int:
        return self.call("sdt_session_switch", [self.opened[sid].struct])

    def flush(self, sid: int) -> None:
        """Each CPU's open packet of the session closed (sdt_session_flush closes the calling CPU's)."""
        for k in range(self.t.cpus):
            if k not in self.t._broken:
                self.call("sdt_session_flush", [self.get(sid).struct], cpu=k)

    def snapshot(self, sid: int) -> dict[str, int]:
        """sdt_snapshot of session ``sid`` (the host's trigger), and what its struct sdt_session then says, as the
        control core's `snapshot` line says it (Refused: the runtime's error)."""
        at = self.get(sid).struct
        kept = self.call("sdt_snapshot", [at])
        s = self._session_at(at)
        return {"id": sid, "area": s["snapshot"], "bytes": s["snapshot_bytes"], "packets": s["snapshot_packets"],
                "taken": s["snapshots"], "lapped": s["snapshot_lapped"], "busy": s["snapshot_busy"], "kept": kept}

    # -- reading ------------------------------------------------------------------------------------------
    def consumer(self, sid: int, take: Callable, streams: Streams | None) -> Consumer:
        """The consumer of session ``sid``'s rings, found through the registry (every field checked); ``streams``
        checks its packets (None: checks of its own, each loss and damage said)."""
        s = self.get(sid)
        if s.consumer is None:
            try:
                rings = session_rings(self.memory, self._table(), sid, self.t.cpus, self.arch.bits)
            except SessionError as e:
                raise SdtError(self.t.image.path, f"session {s.name!r} cannot be read: {e}") from None
            if streams is None:
                streams = self._streams(sid, rings[0].packet_size)
            s.consumer = Consumer(self.memory, self.arch.bits, rings, take, streams)
        s.consumer.on_packet = take
        return s.consumer

    def _streams(self, sid: int, packet: int) -> Streams:
        from sdtgen.event_format import event_format
        from sdtgen.trace.packets import Decoder

        bits, little = self.arch.bits, self.arch.little
        decoder = Decoder([event_format(p.key, p.spec, p.args, bits, little) for p in self.t.image.probes() if p.key],
                          bits, little, stream=sid)
        return Streams(decoder, self.t.clock_hz, self.t.cpus, packet, self.t.host.warning)

    def area_of(self, addr: int) -> tuple[int, int] | None:
        """(session id, CPU) of the struct sdt_cpu at ``addr`` in an open session, if it is one."""
        size = CPU.size(self.arch.bits)
        for s in self.opened.values():
            cpus = self._session_at(s.struct)["cpus"]
            k, off = divmod(addr - cpus, size)
            if off == 0 and 0 <= k < self.t.cpus:
                return s.id, k
        return None

    def _session_at(self, at: int) -> dict[str, int]:
        st = SESSION.struct(self.arch.bits, self.arch.little)
        return dict(zip(SESSION.names(), st.unpack(self.t.machine.read(at, st.size)), strict=True))

    def agg_areas(self, sid: int) -> list[tuple[int, int]]:
        """(struct sdt_agg, table bytes) of each CPU of session ``sid``, as the runtime carved them."""
        s = self._session_at(self.get(sid).struct)
        off, size, out = CPU.offsets(self.arch.bits), CPU.size(self.arch.bits), []
        for k in range(s["ncpus"]):
            out.append((self.memory.load(s["cpus"] + k * size + off["agg"], 8), s["agg_bytes"]))
        return out

    def states(self) -> list[SessionState]:
        """Every session the registry lists, the default one first: its counters summed over its CPUs, and the
        probes whose slots hold its bit (docs/sessions.md's `sessions` line, read in memory)."""
        table = self._table()
        bits, little, read = self.arch.bits, self.arch.little, self.t.machine.read
        found = find_sessions(read, table, lambda a: a, bits, little)
        for problem in found.problems:
            self.t.host.warning(f"the runtime's registry: {problem}")
        slots = [p.program for p in self.t.runtime.probes() if p.program]
        masks = [self.memory.load(a + SLOT.offset("sessions", bits), 4) for a in slots]
        st = SESSION.struct(bits, little)
        out = []
        for f in found.sessions:
            at = self.memory.load(table + REGISTRY.offset("sessions", bits) + 8 * f.id, 8)
            x = dict(zip(SESSION.names(), st.unpack(read(at, st.size)), strict=True))
            areas = [a for a in f.areas if a]
            c = [self._area(a) for a in areas]
            first = c[0] if c else {"policy": 0, "packets": 0, "packet_size": 0}
            out.append(SessionState(f.id, f.name, POLICY_NAMES.get(first["policy"], str(first["policy"])), len(areas),
                                    first["packets"] * first["packet_size"], first["packet_size"],
                                    sum(a["write_seq"] for a in c), sum(a["discarded"] for a in c),
                                    sum(a["overwritten"] for a in c), x["misplaced"],
                                    sum(1 for mask in masks if mask >> f.id & 1)))
        return out

    def _area(self, at: int) -> dict[str, int]:
        st = CPU.struct(self.arch.bits, self.arch.little)
        return dict(zip(CPU.names(), st.unpack(self.t.machine.read(at, st.size)), strict=True))


def _joined(pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for at, n in pieces:
        if out and out[-1][0] + out[-1][1] == at:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((at, n))
    return out


def _name(fields: dict[str, int]) -> str:
    """The name a struct sdt_session's fields hold."""
    return bytes(fields[f"name[{k}]"] for k in range(VALUES["SDT_SESSION_NAME"])).split(b"\0")[0].decode("ascii",
                                                                                                     "replace")
