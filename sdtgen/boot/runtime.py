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
from functools import partial

from sdtgen.arch.base import COND, RETURNS
from sdtgen.boot.machine import GuestFault, Machine
from sdtgen.boot.patcher import PatchedSite, PatchResult, SiteChanged, write_code_verified, write_site
from sdtgen.errors import SdtError
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
    cpu: int | None = None  # the CPU that fired, on a machine of several


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
        # Conditional tail sites fire through a breakpoint on their probe's stub:
        # stub -> (site, the bytes the breakpoint covers, the breakpoint).
        self.stub_traps: dict[int, tuple[PatchedSite, bytes, bytes]] = {}
        # Guest functions called when a probe fires (--action), and the probes whose action is running.
        self.actions: list[tuple[ProbeSpec, int, str]] = []
        self.active: set[str] = set()
        self.on_warning: Callable[[str], None] = lambda text: None
        self.on_action: Callable[[str, int], None] = lambda name, value: None
        self.on_changed: Callable[[PatchedSite, SiteChanged], None] = lambda site, e: None
        self.hits: Counter[str] = Counter()
        self.flag: int | None = None  # sdt_probes_enabled's address: SDT_PROBES_ENABLED() reads it
        self.last_fired: str | None = None
        self.on_fire = on_fire
        self.per_cpu = False  # several CPUs: firings say which one (each CPU's trap is trap_on(that CPU, ...))
        machine.trap = partial(self.trap_on, machine)
        probes: dict[int, TableProbe] = {}
        for s in patched.sites:
            probes.setdefault(s.probe.addr, s.probe)
        self.probes = sorted(probes.values(), key=lambda p: p.id)

    def matching(self, pattern: ProbeSpec) -> list[PatchedSite]:
        return [s for s in self.sites.values() if pattern.matches(s.probe)]

    def enable(self, pattern: ProbeSpec) -> int:
        """Arm every usable site of every probe matching ``pattern``; how many sites that is.

        A site whose bytes something else rewrote is left alone and reported (``on_changed``).
        """
        sites = self.matching(pattern)
        armed = 0
        for s in sites:
            if s.addr in self.armed:
                armed += 1
                continue
            try:
                if s.form == COND:
                    self._arm_stub(s)
                else:
                    write_site(self.machine, s, s.armed)
            except SiteChanged as e:
                self.on_changed(s, e)
                continue
            self.armed.add(s.addr)
            armed += 1
        self.sync_flag()
        return armed

    def _arm_stub(self, site: PatchedSite) -> None:
        stub = site.probe.stub
        if stub in self.stub_traps:
            return
        arch = self.machine.arch
        original = self.machine.read(stub, 8)
        if not arch.is_empty_stub(original):
            raise SdtError("", f"the stub of {site.probe.spec} at {stub:#x} is not an empty function, so its "
                           "conditional tail sites cannot be armed", "link the stubs `sdtgen gen` wrote")
        bp = arch.breakpoint(len(original))
        write_code_verified(self.machine, stub, original[:len(bp)], bp)
        self.stub_traps[stub] = (site, original[:len(bp)], bp)

    def disable(self, pattern: ProbeSpec) -> int:
        """Disarm every armed site of every probe matching ``pattern``; how many sites match."""
        sites = self.matching(pattern)
        for s in sites:
            if s.addr not in self.armed:
                continue
            self.armed.discard(s.addr)
            try:
                if s.form != COND:
                    write_site(self.machine, s, s.disabled)
                elif s.probe.stub in self.stub_traps and not any(
                        self.sites[a].probe.stub == s.probe.stub for a in self.armed if self.sites[a].form == COND):
                    _, covered, bp = self.stub_traps.pop(s.probe.stub)
                    write_code_verified(self.machine, s.probe.stub, bp, covered)
            except SiteChanged as e:
                s.usable = False
                self.on_changed(s, e)
        self.sync_flag()
        return len(sites)

    def sync_flag(self) -> None:
        """SDT_PROBES_ENABLED() is true exactly while some site is armed: keep the guest's flag so."""
        if self.flag is not None:
            self.machine.write(self.flag, b"\x01" if self.armed else b"\x00")

    def armed_probes(self) -> set[str]:
        return {self.sites[a].probe.spec for a in self.armed}

    def trap_on(self, m: Machine, addr: int) -> int:
        """Record a firing on CPU ``m``; where its execution resumes."""
        site = self.sites.get(addr)
        if addr in self.stub_traps:  # a taken conditional tail jump reached its armed stub
            site = self.stub_traps[addr][0]
        elif site is None or addr not in self.armed:
            raise GuestFault("breakpoint trap at a site that is not armed", addr)
        arch = m.arch
        probe = site.probe
        raw = arch.args_at_site(m, len(probe.args), site.form)
        resume = arch.return_address(m) if site.form in RETURNS else addr + site.length
        if probe.spec in self.active:
            # The probe's own action reached it again: like kprobes, disarm it rather than recurse.
            self.disable(ProbeSpec.parse(probe.spec))
            self.on_warning(f"{probe.spec} fired again from its own action; disarmed it")
            return resume
        args = tuple(decode_arg(t, v, m) for t, v in zip(probe.args, raw, strict=True))
        self.hits[probe.spec] += 1
        self.last_fired = probe.spec
        self.on_fire(Firing(probe.spec, addr, args, probe.args, m.cpu if self.per_cpu else None))
        for pattern, func, name in self.actions:
            if pattern.matches(probe):
                self.active.add(probe.spec)
                try:
                    self.on_action(name, m.call_nested(func, raw))
                finally:
                    self.active.discard(probe.spec)
        return resume
