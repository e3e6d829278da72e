"""A session's rings read through a control core's `read` command, for a kernel that does not send a session's packets
on its line (`@NAME drain` refused: docs/sessions.md, "read in the machine's memory").

The session is found as a host finds it after a crash: the runtime's registry (the variable sdt_session_table, by the
image's symbols), its struct sdt_session by id, each CPU's struct sdt_cpu in its `cpus` array (sdtgen/layout.py:
REGISTRY, SESSION, CPU), each believed only as far as it checks. The packets are then read as the host's consumer
reads any ring (sdtgen/transport/consumer.py), with one difference the line imposes: `read` cannot write the guest's
read_seq, so the packets read are claimed here, on the host's side (a shadow of read_seq, never behind the guest's:
an overwriting writer's own claims count). A `discard` session's ring therefore frees no slot for its writer: once a
ring's worth is closed it discards, and counts what it discarded (the session's `stats`); an `overwrite` one keeps its
last ring's worth, as a flight recorder does.
"""

from __future__ import annotations

from collections.abc import Callable

from sdtgen.layout import CPU, REGISTRY, SESSION, VALUES
from sdtgen.transport.consumer import Ring
from sdtgen.transport.salvage import MAX_PACKET, MAX_RING  # what a ring read out of memory may be at most

ReadFn = Callable[[int, int], bytes | None]  # (address, bytes): what the kernel's `read` answers (None: nothing there)


class SessionError(Exception):
    """The registry or the session's description cannot be believed: the message says what is wrong."""


class LineMemory:
    """The kernel's memory through ``read`` (its control core's `read`), with read_seq claimed on the host's side."""

    stopped = False  # the kernel's CPUs record while the host reads

    def __init__(self, read: ReadFn, little: bool) -> None:
        self._read = read
        self.order = "little" if little else "big"
        self.shadow: dict[int, int] = {}  # read_seq's address -> the packets this host has read there

    def read(self, addr: int, size: int) -> bytes:
        data = self._read(addr, size)
        if data is None or len(data) != size:
            raise SessionError(f"the kernel has no {size} bytes to read at {addr:#x}")
        return data

    def write(self, addr: int, data: bytes) -> None:
        """A consumer that would move a ring's counters back: not through `read`, so left as the host's shadow."""
        self.shadow[addr] = int.from_bytes(data, self.order)

    def load(self, addr: int, width: int) -> int:
        value = int.from_bytes(self.read(addr, width), self.order)
        return max(value, self.shadow.get(addr, 0))

    def claim(self, addr: int, expect: int, width: int) -> bool:
        if self.load(addr, width) != expect:
            return False  # the writer claimed it first (overwrote it)
        self.shadow[addr] = expect + 1
        return True


def session_rings(memory: LineMemory, registry: int, sid: int, cpus: int, bits: int) -> list[Ring]:
    """Each CPU's ring of session ``sid``, from the registry at ``registry`` (the kernel's address of
    sdt_session_table): every field checked against what an open session of that id must hold."""
    little = memory.order == "little"
    reg = dict(zip(REGISTRY.names(), REGISTRY.struct(bits, little).unpack(memory.read(registry, REGISTRY.size(bits))),
                   strict=True))
    if reg["magic"] != VALUES["SDT_REGISTRY_MAGIC"] or not 0 < sid < min(reg["max"], VALUES["SDT_MAX_SESSIONS"]):
        raise SessionError(f"sdt_session_table at {registry:#x} is not the runtime's registry (magic "
                           f"{reg['magic']:#x}, {reg['max']} sessions) or has no session {sid}")
    at = reg[f"sessions[{sid}]"]
    if not at:
        raise SessionError(f"the registry has no session {sid} open")
    s = dict(zip(SESSION.names(), SESSION.struct(bits, little).unpack(memory.read(at, SESSION.size(bits))),
                 strict=True))
    n, size, ring = s["ncpus"], s["packet_size"], s["ring_bytes"]
    if (s["magic"] != VALUES["SDT_SESSION_MAGIC"] or s["id"] != sid or not 1 <= n <= cpus
            or not VALUES["SDT_MIN_PACKET"] <= size <= MAX_PACKET or size & (size - 1) or ring % size
            or not ring // size >= 2 or ring > MAX_RING or (ring // size) & (ring // size - 1)):
        raise SessionError(f"the session at {at:#x} is not an open session {sid} of at most {cpus} CPUs with a ring "
                           f"the runtime takes (magic {s['magic']:#x}, id {s['id']}, {n} CPUs, ring {ring}, packet "
                           f"{size})")
    off, step, out = CPU.offsets(bits), CPU.size(bits), []
    for k in range(n):
        area = s["cpus"] + k * step
        cpu, where = (memory.load(area + off[f], 8) for f in ("cpu", "ring"))
        if cpu != k or not where:
            raise SessionError(f"CPU {k}'s area of session {sid} at {area:#x} says CPU {cpu}, ring {where:#x}")
        out.append(Ring(area, where, ring // size, size))
    return out
