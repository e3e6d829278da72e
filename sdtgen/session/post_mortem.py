"""The post-mortem as a session runs it (docs/post-mortem.md): which sessions' rings to read, where each one's
trace goes, and the reading itself (sdtgen/transport/salvage.py), once, when the kernel panicked, hung or died.

The default session's areas are those the host was told of (`shared on`, the emulator's platform); the runtime's
registry (sdt_session_table, found by the image's symbols) gives them too for a kernel that never said, and every
other open session's. Each session's trace is its own: the default session's at --post-mortem's PATH, session
NAME's beside it at PATH-NAME (before its extension).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from sdtgen.plaindata import record
from sdtgen.targets.base import Rings
from sdtgen.trace.packets import Decoder
from sdtgen.transport.salvage import Salvage, salvage


@record(frozen=True)
class Read:
    """One session's rings as read."""

    id: int
    name: str
    salvage: Salvage


def read_sessions(rings: Rings, decoder: Decoder, clock_hz: int, bits: int, little: bool,
                  warn: Callable[[str], None]) -> list[Read]:
    """Every session whose areas can be found, its rings read; what of the registry cannot be believed, said."""
    wanted: list[tuple[int, str, Rings]] = []
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
    return [Read(sid, name, salvage(r, decoder, clock_hz, bits, little, sid)) for sid, name, r in wanted]


def session_path(path: str, name: str, sid: int) -> str:
    """Where session ``name``'s trace goes: PATH for the default session, PATH-NAME (before its extension) else."""
    if sid == 0:
        return path
    bare = path.rstrip("/")
    stem, ext = os.path.splitext(bare)
    return f"{stem}-{name}{ext}" if ext in (".json", ".pftrace", ".perfetto-trace", ".pb") else f"{bare}-{name}"
