"""A session opened on the kernel's line with a program of its own (SPEC /predicate/), as another host holding it
would open it: the streaming session of the QEMU tests that run three sessions on one line."""

from __future__ import annotations

from session_pair import RING, KernelSession, command

from sdtgen.dscript import compile_script
from sdtgen.layout import VALUES, parse_reply
from sdtgen.transport.geometry import packet_size_for

TABLES = 64 << 10  # each CPU's aggregation tables, in the sessions that run a program


class FilteredSession(KernelSession):
    """A session opened on the line with its own tables and ``text`` (SPEC /predicate/) enabled as a program of its
    own (`program`, `pbytes`, `@NAME penable`), as another host holding it would."""

    def __init__(self, session, name: str, text: str) -> None:
        t = session.target
        line = command(t, f"session open {name} {RING:x} {packet_size_for(RING):x} {VALUES['SDT_DISCARD']:x} "
                          f"{TABLES:x}")[-1]
        compiled = compile_script(text, session.probes, session.image.arch.bits, source=name)
        for p in compiled.programs:
            at = t.load_program(p.code)
            for spec in p.specs:
                command(t, f"@{name} penable branch {at:x} {len(p.code):x} {spec}")
        super().__init__(session, name, None)
        assert self.id == int(parse_reply("", line)[1]["count"])
