"""Boot-time patching: every verified site becomes a NOP (or a return, for a tail jump).

Like Linux's ftrace_verify_code(), nothing is written over bytes that are not
exactly the expected call or jump to the probe's stub: such a site is refused,
reported and left alone. Only bytes an executable segment holds in the file
can be a site. Sites are verified and patched in one pass over a copy of each
executable segment, written back once and invalidated once, so tens of
thousands of sites cost one emulator write.

After that, every write to a site goes through ``write_site``: like ftrace
and jump labels, it first checks the bytes are exactly what sdtgen last wrote
there, so code the guest rewrote is never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdtgen.arch.base import CALL, COND, ISEN, Arch, branch_form
from sdtgen.boot.machine import GuestFault, Machine
from sdtgen.table import TableProbe, TableSite


@dataclass(slots=True)
class PatchedSite:
    addr: int
    length: int
    form: str
    probe: TableProbe
    original: bytes  # the call that was there
    disabled: bytes  # what the patcher wrote: NOP, or return + NOPs
    armed: bytes  # breakpoint over the first bytes of ``disabled``
    current: bytes = b""  # what sdtgen last wrote there (what the next write expects to find)
    usable: bool = True  # False once the bytes were found changed: sdtgen writes there no more


class SiteChanged(Exception):
    """The bytes at a site are not what sdtgen last wrote there: something else rewrote the code."""

    def __init__(self, addr: int, expected: bytes, found: bytes) -> None:
        super().__init__(f"found {found.hex(' ')} where sdtgen last wrote {expected.hex(' ')}")
        self.addr = addr
        self.expected = expected
        self.found = found


def write_code_verified(machine: Machine, addr: int, expected: bytes, new: bytes) -> None:
    """Write ``new`` at ``addr`` only if the bytes there are exactly ``expected``; else SiteChanged."""
    try:
        found = machine.read(addr, len(expected))
    except GuestFault:
        found = b""
    if found != expected:
        raise SiteChanged(addr, expected, found)
    machine.write_code(addr, new)


def write_site(machine: Machine, site: PatchedSite, new: bytes) -> None:
    """Arm or disarm ``site``: the one way sdtgen writes a site after the boot's patching.

    On SiteChanged the site is marked unusable and left as the guest made it.
    """
    if not site.usable:
        raise SiteChanged(site.addr, site.current, machine.read(site.addr, site.length))
    try:
        write_code_verified(machine, site.addr, site.current, new)
    except SiteChanged:
        site.usable = False
        raise
    site.current = new


@dataclass(frozen=True)
class Refusal:
    entry: TableSite
    found: bytes
    reason: str


@dataclass
class PatchResult:
    sites: list[PatchedSite]
    refused: list[Refusal]
    folded: int = 0  # entries for a site already patched: identical code folding merged their functions


def patch_sites(machine: Machine, entries: list[TableSite]) -> PatchResult:
    """Verify and patch every entry, in address order, in copies of the code regions written back once."""
    arch = machine.arch
    sites: list[PatchedSite] = []
    refused: list[Refusal] = []
    buffers: dict[int, bytearray] = {}  # executable segment start -> a copy of its file bytes
    encodings: dict[tuple[str, int], tuple[bytes, bytes]] = {}  # (form, length) -> (disabled, armed)
    span = None
    last: PatchedSite | None = None
    folded = 0
    for e in sorted(entries, key=lambda e: e.addr):
        if last is not None and e.addr < last.addr + last.length:
            if e.addr == last.addr and e.probe.addr == last.probe.addr:
                folded += 1  # identical code folding: two entries, one site
            else:
                refused.append(Refusal(e, b"", "overlaps a site already patched"))
            continue
        if span is None or not span.start <= e.addr < span.end:
            span = machine.code_at(e.addr)
        if span is None:
            refused.append(Refusal(e, b"", "not inside an executable segment of the image"))
            continue
        if e.addr + e.length > span.end:
            refused.append(Refusal(e, b"", f"its {e.length}-byte site runs past the end of the executable "
                                           f"segment at {span.start:#x}..{span.end:#x}"))
            continue
        buf = buffers.get(span.start)
        if buf is None:  # only the code the file holds: a segment's zero-filled tail is no site
            buf = buffers[span.start] = bytearray(machine.read(span.start, span.end - span.start))
        off = e.addr - span.start
        code = buf[off:off + e.length]
        stub = site_stub(e)
        length = arch.match_site(code, e.addr, branch_form(e.form), e.length, stub, machine.read_pointer)
        if length is None:
            refused.append(Refusal(e, bytes(code), f"not the expected {e.form} to the stub at {stub:#x}"))
            continue
        if e.form == COND:
            # A conditional tail jump already does the disabled thing: taken, it reaches the empty
            # stub, which returns. It stays; arming puts the breakpoint on the stub instead.
            disabled = armed = bytes(code[:length])
        else:
            pair = encodings.get((e.form, length))
            if pair is None:
                pair = encodings[(e.form, length)] = site_encodings(arch, e.form, length)
            disabled, armed = pair
            buf[off:off + length] = disabled
        last = PatchedSite(e.addr, length, e.form, e.probe, bytes(code[:length]), disabled, armed, disabled)
        sites.append(last)
    for start, buf in buffers.items():
        machine.write_code(start, bytes(buf))
    return PatchResult(sites, refused, folded)


def site_stub(entry: TableSite) -> int:
    """The function a site must call: an is-enabled check calls its probe's is-enabled stub."""
    return entry.probe.isenabled if entry.form == ISEN else entry.probe.stub


def site_encodings(arch: Arch, form: str, length: int) -> tuple[bytes, bytes]:
    """(disabled, armed) bytes of a ``length``-byte site of ``form`` (not COND, which stays as it is).

    A call becomes a NOP and a tail jump a return, armed by a breakpoint over their first bytes; an
    is-enabled call becomes "result = 0" and, armed, "result = 1": no trap, and asking fires nothing.
    """
    if form == ISEN:
        return arch.set_result(length, 0), arch.set_result(length, 1)
    off_bytes = arch.nop(length) if form == CALL else arch.tail_return(length)
    bp = arch.breakpoint(length)
    return off_bytes, bp + off_bytes[len(bp):]
