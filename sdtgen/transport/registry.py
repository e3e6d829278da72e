"""The runtime's registry of sessions, read out of a machine's memory: where every session's CPU areas are, for a
kernel that never said (docs/post-mortem.md).

The runtime keeps ``sdt_session_table`` (layout.py's REGISTRY): its magic and version, the address of each open
struct sdt_session by id (0: the default session), and the default session's first CPU area, the others linked by
their next_area. Another session's areas are its struct sdt_cpu array, ``ncpus`` of them. Every address in it is
the kernel's: ``host`` turns one into the address the host reads at. Nothing is believed that does not check (the
magics, the version, each session's id and name, an area list that ends): what does not is said, and its areas are
not read.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sdtgen.layout import CPU, REGISTRY, SESSION, SNAPSHOT, VALUES
from sdtgen.limits import MAX_CPUS
from sdtgen.plaindata import record
from sdtgen.transport.salvage import MAX_PACKET

NAME = re.compile(r"[A-Za-z0-9_-]{1,15}")
OPEN, CLOSING = VALUES["SDT_SESSION_OPEN"], VALUES["SDT_SESSION_CLOSING"]


@record(frozen=True)
class FoundSession:
    """One session the registry lists: its id, its name, and CPU k's area at ``areas[k]`` (the host's address; 0
    for a CPU it has none of); CPU k's block of its snapshot area at ``snapshot[k]`` (empty: it has none), each
    ``snapshot_packets`` + 1 packets of ``packet_size`` bytes after its struct sdt_snapshot."""

    id: int
    name: str
    areas: tuple[int, ...]
    snapshot: tuple[int, ...] = ()
    snapshot_packets: int = 0
    packet_size: int = 0
    snapshots: int = 0  # the session's counters of sdt_snapshot: taken, refused as busy, packets lapped
    snapshot_busy: int = 0
    snapshot_lapped: int = 0

    def snapshot_refused(self) -> str | None:
        """What a reader of its snapshot must be told: snapshots refused (one under way, a CPU stopped inside one,
        or the session closing), so the one it holds may be older than the moment a trigger asked for."""
        if not self.snapshot_busy:
            return None
        return (f"session {self.name} refused {self.snapshot_busy} snapshot(s) as busy (one under way, a CPU stopped "
                f"inside one, or the session closing): the snapshot read is the last of the {self.snapshots} taken, "
                "maybe older than the trigger's")


@record
class Found:
    sessions: list[FoundSession]
    problems: list[str]


def find_sessions(read: Callable[[int, int], bytes], table: int, host: Callable[[int], int], bits: int,
                  little: bool) -> Found:
    """The sessions of the registry at ``table`` (the host's address), in id order."""
    out = Found([], [])
    reg = _struct(read, table, REGISTRY, bits, little, out, "sdt_session_table")
    if reg is None:
        return out
    if reg["magic"] != VALUES["SDT_REGISTRY_MAGIC"] or reg["version"] != VALUES["SDT_REGISTRY_VERSION"]:
        out.problems.append(f"sdt_session_table says magic {reg['magic']:#x}, version {reg['version']}: the runtime "
                            "did not set it up (sdt_init never ran), or it is damaged")
        return out
    n = VALUES["SDT_MAX_SESSIONS"]
    for sid in range(n):
        at = reg[f"sessions[{sid}]"]
        if not at:
            continue
        try:  # an address the host cannot map is damage, said, not a traceback
            place = host(at)
        except ValueError as e:
            out.problems.append(f"session {sid}'s struct sdt_session at {at:#x} is not in the machine's memory: {e}")
            continue
        s = _struct(read, place, SESSION, bits, little, out, f"session {sid}'s struct sdt_session")
        if s is None:
            continue
        name = bytes(s[f"name[{k}]"] for k in range(VALUES["SDT_SESSION_NAME"])).rstrip(b"\0").decode("ascii",
                                                                                                      "replace")
        if s["magic"] != VALUES["SDT_SESSION_MAGIC"] or s["id"] != sid or s["state"] not in (OPEN, CLOSING) or \
                not NAME.fullmatch(name):
            out.problems.append(f"session {sid}'s struct sdt_session at {at:#x} is damaged (magic {s['magic']:#x}, id "
                                f"{s['id']}, state {s['state']}): its rings are not read")
            continue
        areas = _listed(read, host, reg["areas"], bits, little, out) if sid == 0 else \
            _array(host, s["cpus"], s["ncpus"], bits, out, name)
        if areas is not None:
            blocks = _snapshot(host, s, bits, out, name) if sid else ()
            out.sessions.append(FoundSession(sid, name, areas, blocks, s["snapshot_packets"] if blocks else 0,
                                             s["packet_size"], s["snapshots"], s["snapshot_busy"],
                                             s["snapshot_lapped"]))
    return out


def _snapshot(host, s: dict[str, int], bits: int, out: Found, name: str) -> tuple[int, ...]:
    """Where each CPU's block of session ``name``'s snapshot area is (empty: it has none, or what the session says
    of it cannot be believed, said)."""
    if not s["snapshot"]:
        return ()
    n, size, each = s["snapshot_packets"], s["packet_size"], s["snapshot_bytes"]
    if not (0 < n <= VALUES["SDT_SNAPSHOT_MAX"] and VALUES["SDT_MIN_PACKET"] <= size <= MAX_PACKET
            and not size & (size - 1) and each == VALUES["SDT_SNAPSHOT_HEAD"] + (n + 1) * size
            and SNAPSHOT.size(bits) <= VALUES["SDT_SNAPSHOT_HEAD"]):
        out.problems.append(f"session {name} says a snapshot area of {n} packets of {size} bytes in blocks of "
                            f"{each}: its snapshot is not read")
        return ()
    try:
        return tuple(host(s["snapshot"] + k * each) for k in range(s["ncpus"]))
    except ValueError as e:
        out.problems.append(f"session {name}'s snapshot area at {s['snapshot']:#x} is not in the machine's memory: "
                            f"{e}")
        return ()


def _struct(read, at: int, layout, bits: int, little: bool, out: Found, what: str) -> dict[str, int] | None:
    st = layout.struct(bits, little)
    try:
        return dict(zip(layout.names(), st.unpack(read(at, st.size)), strict=True))
    except ValueError as e:
        out.problems.append(f"{what} at {at:#x} cannot be read: {e}")
        return None


def _listed(read, host, first: int, bits: int, little: bool, out: Found) -> tuple[int, ...] | None:
    """The default session's areas, linked from the registry by next_area, placed by their CPU numbers."""
    off = CPU.offsets(bits)
    order = "little" if little else "big"
    by_cpu: dict[int, int] = {}
    at, seen = first, 0
    while at:
        seen += 1
        if seen > MAX_CPUS:
            out.problems.append(f"the default session's list of CPU areas does not end after {MAX_CPUS}")
            return None
        try:
            where = host(at)
            cpu = int.from_bytes(read(where + off["cpu"], 8), order)
            at = int.from_bytes(read(where + off["next_area"], 8), order)
        except ValueError as e:
            out.problems.append(f"a CPU area of the default session at {at:#x} cannot be read: {e}")
            return None
        if cpu >= MAX_CPUS or cpu in by_cpu:
            out.problems.append(f"the default session's list of CPU areas names CPU {cpu} "
                                + ("twice" if cpu in by_cpu else f"(at most {MAX_CPUS})"))
            return None
        by_cpu[cpu] = where
    return tuple(by_cpu.get(k, 0) for k in range(max(by_cpu) + 1)) if by_cpu else ()


def _array(host, cpus: int, ncpus: int, bits: int, out: Found, name: str) -> tuple[int, ...] | None:
    if not 0 < ncpus <= MAX_CPUS or not cpus:
        out.problems.append(f"session {name} says {ncpus} CPUs at {cpus:#x}: its rings are not read")
        return None
    size = CPU.size(bits)
    try:
        return tuple(host(cpus + k * size) for k in range(ncpus))
    except ValueError as e:
        out.problems.append(f"session {name}'s CPU areas at {cpus:#x} are not in the machine's memory: {e}")
        return None
