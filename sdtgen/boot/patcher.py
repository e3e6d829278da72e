"""Boot-time patching: every verified site becomes a NOP (or a return, for a tail jump).

Like Linux's ftrace_verify_code(), nothing is written over bytes that are not
exactly the expected call or jump to the probe's stub: such a site is refused,
reported and left alone. Sites are verified and patched in one pass over a
copy of each code region, written back once and invalidated once, so tens of
thousands of sites cost one emulator write.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdtgen.arch.base import CALL, COND, ISEN, Arch, branch_form
from sdtgen.boot.machine import Machine
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
    buffers: dict[int, bytearray] = {}  # region start -> a copy of its bytes
    encodings: dict[tuple[str, int], tuple[bytes, bytes]] = {}  # (form, length) -> (disabled, armed)
    region = None
    last: PatchedSite | None = None
    folded = 0
    for e in sorted(entries, key=lambda e: e.addr):
        if last is not None and e.addr < last.addr + last.length:
            if e.addr == last.addr and e.probe.addr == last.probe.addr:
                folded += 1  # identical code folding: two entries, one site
            else:
                refused.append(Refusal(e, b"", "overlaps a site already patched"))
            continue
        if region is None or not region.vaddr <= e.addr < region.vaddr + region.size:
            region = machine.region_at(e.addr)
        if region is None or not region.executable or e.addr + e.length > region.code_end:
            refused.append(Refusal(e, b"", "not inside the image's executable code"))
            continue
        buf = buffers.get(region.vaddr)
        if buf is None:  # only the code the file holds: a region's zero-filled tail is no site
            buf = buffers[region.vaddr] = bytearray(machine.read(region.vaddr, region.code_end - region.vaddr))
        off = e.addr - region.vaddr
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
        last = PatchedSite(e.addr, length, e.form, e.probe, bytes(code[:length]), disabled, armed)
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
