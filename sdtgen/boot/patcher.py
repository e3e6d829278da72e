"""Boot-time patching: every verified site becomes a NOP (or a return, for a tail jump).

Like Linux's ftrace_verify_code(), nothing is written over bytes that are not
exactly the expected call or jump to the probe's stub: such a site is refused,
reported and left alone. Sites are verified and patched in one pass over a
copy of each code region, written back once and invalidated once, so tens of
thousands of sites cost one emulator write.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdtgen.arch.base import CALL, COND
from sdtgen.boot.machine import Machine
from sdtgen.table import TableProbe, TableSite


@dataclass(frozen=True)
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
    arch = machine.arch
    sites: list[PatchedSite] = []
    refused: list[Refusal] = []
    buffers: dict[int, tuple[int, bytearray]] = {}  # region start -> (start, copy of its bytes)
    seen: set[int] = set()
    by_addr: dict[int, PatchedSite] = {}
    folded = 0
    for e in entries:
        twin = by_addr.get(e.addr)
        if twin is not None and twin.probe.addr == e.probe.addr and twin.length == e.length:
            folded += 1
            continue
        if not machine.is_code(e.addr, e.length):
            refused.append(Refusal(e, b"", "not inside the image's executable code"))
            continue
        region = machine.region_of(e.addr)
        start, buf = buffers.get(region.vaddr) or buffers.setdefault(
            region.vaddr, (region.vaddr, bytearray(machine.read(region.vaddr, region.size))))
        off = e.addr - start
        code = bytes(buf[off:off + e.length])
        if any(a in seen for a in range(e.addr, e.addr + e.length)):
            refused.append(Refusal(e, code, "overlaps a site already patched"))
            continue
        length = arch.match_site(code, e.addr, e.form, e.length, e.probe.stub, machine.read_pointer)
        if length is None:
            refused.append(Refusal(e, code, f"not the expected {e.form} to the stub at {e.probe.stub:#x}"))
            continue
        if e.form == COND:
            # A conditional tail jump already does the disabled thing: taken, it reaches the empty
            # stub, which returns. It stays; arming puts the breakpoint on the stub instead.
            disabled = armed = code[:length]
        else:
            disabled = arch.nop(length) if e.form == CALL else arch.tail_return(length)
            bp = arch.breakpoint(length)
            armed = bp + disabled[len(bp):]
        buf[off:off + length] = disabled
        seen.update(range(e.addr, e.addr + length))
        by_addr[e.addr] = PatchedSite(e.addr, length, e.form, e.probe, code[:length], disabled, armed)
        sites.append(by_addr[e.addr])
    for start, buf in buffers.values():
        machine.write_code(start, bytes(buf))
    return PatchResult(sites, refused, folded)
