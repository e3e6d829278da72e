"""The probe runtime: arm and disarm patched sites, and turn breakpoint traps into firings.

Only armed sites ever reach Python: a disarmed site is a NOP the emulator runs
like any other instruction. A trap is resolved by one dictionary lookup on
its address; the arguments are read where the calling convention has them
at the site, decoded per the probe's declared types, and execution resumes
after the site (or returns, for a tail-jump site).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from sdtgen.boot.machine import GuestFault, Machine
from sdtgen.boot.patcher import PatchedSite, PatchResult
from sdtgen.probes import ProbeSpec
from sdtgen.table import TableProbe

MAX_STRING_ARG = 256
_STRING_TYPES = {"char*", "constchar*", "charconst*"}


@dataclass(frozen=True)
class Firing:
    probe: str
    pc: int
    args: tuple[int | str | None, ...]
    types: tuple[str, ...]


def decode_arg(ctype: str, raw: int, machine: Machine) -> int | str | None:
    """``int`` as signed 32-bit, strings read from guest memory (None if unreadable), the rest unsigned."""
    t = ctype.replace(" ", "")
    if t in ("int", "signedint", "signed"):
        low = raw & 0xFFFFFFFF
        return low - (1 << 32) if low & 0x80000000 else low
    if t in _STRING_TYPES:
        return read_guest_string(machine, raw)
    return raw & ((1 << machine.arch.bits) - 1)


def read_guest_string(machine: Machine, addr: int) -> str | None:
    out = bytearray()
    while len(out) < MAX_STRING_ARG:
        try:
            chunk = machine.read(addr + len(out), 16)
        except GuestFault:
            try:
                chunk = machine.read(addr + len(out), 1)
            except GuestFault:
                return None
        end = chunk.find(b"\0")
        if end >= 0:
            out += chunk[:end]
            return out.decode("utf-8", "replace")
        out += chunk
    return out[:MAX_STRING_ARG].decode("utf-8", "replace")


class ProbeRuntime:
    def __init__(self, machine: Machine, patched: PatchResult, on_fire: Callable[[Firing], None]) -> None:
        self.machine = machine
        self.sites: dict[int, PatchedSite] = {s.addr: s for s in patched.sites}
        self.armed: set[int] = set()
        self.hits: Counter[str] = Counter()
        self.last_fired: str | None = None
        self.on_fire = on_fire
        machine.trap = self._trap
        probes: dict[int, TableProbe] = {}
        for s in patched.sites:
            probes.setdefault(s.probe.addr, s.probe)
        self.probes = sorted(probes.values(), key=lambda p: p.id)

    def matching(self, spec: str) -> list[PatchedSite]:
        try:
            pattern = ProbeSpec.parse(spec)
        except ValueError as e:
            raise SpecError(str(e)) from None
        return [s for s in self.sites.values() if pattern.matches(s.probe)]

    def enable(self, spec: str) -> int:
        """Arm every site of every probe matching ``spec``; how many sites that is."""
        sites = self.matching(spec)
        for s in sites:
            if s.addr not in self.armed:
                self.machine.write_code(s.addr, s.armed)
                self.armed.add(s.addr)
        return len(sites)

    def disable(self, spec: str) -> int:
        sites = self.matching(spec)
        for s in sites:
            if s.addr in self.armed:
                self.machine.write_code(s.addr, s.disabled)
                self.armed.discard(s.addr)
        return len(sites)

    def armed_probes(self) -> set[str]:
        return {self.sites[a].probe.spec for a in self.armed}

    def _trap(self, addr: int) -> int:
        """Record a firing; where execution resumes."""
        site = self.sites.get(addr)
        if site is None or addr not in self.armed:
            raise GuestFault("breakpoint trap at a site that is not armed", addr)
        m, arch = self.machine, self.machine.arch
        probe = site.probe
        raw = arch.args_at_site(m, len(probe.args), site.form)
        args = tuple(decode_arg(t, v, m) for t, v in zip(probe.args, raw, strict=True))
        self.hits[probe.spec] += 1
        self.last_fired = probe.spec
        self.on_fire(Firing(probe.spec, addr, args, probe.args))
        if site.form == "tail":
            return arch.return_address(m)  # the jump would have returned through the stub
        return addr + site.length


class SpecError(ValueError):
    pass

