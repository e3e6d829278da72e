"""The post-mortem as a session runs it (docs/post-mortem.md): which sessions' rings to read, where each one's
trace goes, and the reading itself (sdtgen/transport/salvage.py), once, when the kernel panicked, hung or died.

The default session's areas are those the host was told of (`shared on`, the emulator's platform); the runtime's
registry (sdt_session_table, found by the image's symbols) gives them too for a kernel that never said, and every
other open session's. Each session's trace is its own: the default session's at --post-mortem's PATH, session
NAME's beside it at PATH-NAME (before its extension), and the last snapshot a session with a snapshot area holds
(docs/sessions.md, "Snapshots") at PATH-NAME.snapshot. The same registry gives a running kernel's snapshot to
--snapshot (read_snapshot).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from sdtgen.plaindata import record
from sdtgen.targets.base import Rings
from sdtgen.trace.packets import Decoder
from sdtgen.transport.salvage import Salvage, salvage, snapshot


@record(frozen=True)
class Read:
    """One session's rings as read (``snapshot``: its snapshot area's, not its rings)."""

    id: int
    name: str
    salvage: Salvage
    snapshot: bool = False


def read_sessions(rings: Rings, decoder: Decoder, clock_hz: int, bits: int, little: bool,
                  warn: Callable[[str], None]) -> list[Read]:
    """Every session whose areas can be found, its rings read, then the snapshots sessions hold; what of the registry
    cannot be believed, said."""
    wanted: list[tuple[int, str, Rings]] = []
    snapshots: list[Read] = []
    if rings.areas:
        wanted.append((0, "default", rings))
    kernel = rings.kernel or rings.host
    if rings.registry is not None and kernel is not None:
        from sdtgen.transport.registry import find_sessions

        found = find_sessions(rings.read, rings.registry, kernel, bits, little)
        for problem in found.problems:
            warn(f"post-mortem: {problem}")
        for s in found.sessions:
            if s.id or not rings.areas:  # the default session's areas the host was told of come first
                wanted.append((s.id, s.name, Rings(rings.read, s.areas, (), kernel)))
            if s.snapshot:
                got = snapshot(rings.read, s.snapshot, s.snapshot_packets, s.packet_size, decoder, clock_hz, bits,
                               little, s.id)
                if got.cpus or got.distrusted:  # a snapshot was taken
                    snapshots.append(Read(s.id, s.name, got, True))
                if s.snapshot_refused():
                    warn(f"post-mortem: {s.snapshot_refused()}")
    return [Read(sid, name, salvage(r, decoder, clock_hz, bits, little, sid)) for sid, name, r in wanted] + snapshots


def read_snapshot(rings: Rings, name: str, decoder: Decoder, clock_hz: int, bits: int, little: bool,
                  warn: Callable[[str], None]) -> Salvage | str:
    """The snapshot session ``name`` holds, read out of the machine's memory through the registry; else why not."""
    kernel = rings.kernel or rings.host
    if rings.registry is None or kernel is None:
        return "the image has no sdt_session_table (the runtime's registry of sessions)"
    from sdtgen.transport.registry import find_sessions

    found = find_sessions(rings.read, rings.registry, kernel, bits, little)
    for problem in found.problems:
        warn(f"snapshot: {problem}")
    match = [s for s in found.sessions if s.name == name]
    if not match:
        return "the kernel has no session of that name open"
    s = match[0]
    if not s.snapshot:
        return "the session has no snapshot area (opened with snapshot_packets 0)"
    got = snapshot(rings.read, s.snapshot, s.snapshot_packets, s.packet_size, decoder, clock_hz, bits, little, s.id)
    if s.snapshot_refused():
        warn(f"snapshot: {s.snapshot_refused()}")
    if not got.cpus and not got.distrusted:
        return "the session holds no snapshot: none was taken yet"
    return got


def session_path(path: str, name: str, sid: int) -> str:
    """Where session ``name``'s trace goes: PATH for the default session, PATH-NAME (before its extension) else."""
    if sid == 0 and name == "default":
        return path
    bare = path.rstrip("/")
    stem, ext = os.path.splitext(bare)
    return f"{stem}-{name}{ext}" if ext in (".json", ".pftrace", ".perfetto-trace", ".pb") else f"{bare}-{name}"
