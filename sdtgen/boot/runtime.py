"""The probe runtime: arm and disarm patched sites in either mode, and drain what fired.

Only armed sites do anything: a disarmed site is a NOP the emulator runs like
any other instruction. A site is armed in one of two modes. ``branch`` writes
a call to the probe's recorder (guest code `gen` wrote) over the NOP, so a
firing never leaves the guest. ``trap`` writes the breakpoint; the trap is
resolved by one dictionary lookup on its address, and the host makes the
guest enter the same recorder as if the site had called it. Either way the
record lands in this CPU's ring buffer, which the host drains whenever the
guest stops. Images without recorders (built by an older sdtgen) fire in
trap mode, decoded by the host.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sdtgen.arch.base import CALL, COND, RETURNS, TAIL
from sdtgen.boot.buffers import Event, Format, Rings, decode
from sdtgen.boot.machine import GuestFault, Machine
from sdtgen.boot.patcher import PatchedSite, PatchResult, SiteChanged, write_code_verified, write_site
from sdtgen.errors import SdtError
from sdtgen.probes import ProbeSpec
from sdtgen.table import TableProbe

MAX_STRING_ARG = 256
_STRING_TYPES = {"char*", "constchar*", "charconst*"}
TRAP, BRANCH = "trap", "branch"
FIRING = (CALL, TAIL, COND)  # site forms that record a firing (an is-enabled check only reads 0 or 1)
ARM_MODES = (TRAP, BRANCH)


@dataclass(frozen=True)
class Firing:
    probe: str
    pc: int
    args: tuple[int | str | None, ...]
    types: tuple[str, ...]
    cpu: int | None = None
    ts: int | None = None  # the guest's clock when it recorded the firing


@dataclass
class DataPath:
    """What the image's recorders need: the rings, each probe's recorder and how its records decode."""

    rings: Rings
    recorders: dict[int, int]  # probe stub -> its recorder
    formats: dict[int, Format]  # record key -> how to decode it


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
    def __init__(self, machine: Machine, patched: PatchResult, on_fire: Callable[[Firing], None],
                 data: DataPath | None = None) -> None:
        self.machine = machine
        self.sites: dict[int, PatchedSite] = {s.addr: s for s in patched.sites}
        self.armed: set[int] = set()
        self.data = data
        self.mode = TRAP
        self.trapped: set[int] = set()  # armed sites that carry the breakpoint (the others branch)
        self.out_of_range: set[int] = set()  # sites branch mode arms with the breakpoint: said once each
        self.lost = 0
        # Conditional tail sites fire through a breakpoint on their probe's stub:
        # stub -> (site, the bytes the breakpoint covers, the breakpoint).
        self.stub_traps: dict[int, tuple[PatchedSite, bytes, bytes]] = {}
        # Guest functions called when a probe fires (--action), and the probes whose action is running.
        self.actions: list[tuple[ProbeSpec, int, str]] = []
        self.active: set[str] = set()
        self.on_warning: Callable[[str], None] = lambda text: None
        self.on_action: Callable[[str, int], None] = lambda name, value: None
        self.on_changed: Callable[[PatchedSite, SiteChanged], None] = lambda site, e: None
        # Report what a CPU's ring holds now: only the trapping CPU's, since another CPU may be paused
        # inside its recorder with a record half written.
        self.on_drain: Callable[[int], None] = lambda cpu: None
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
        self.by_spec = {p.spec: p for p in self.probes}
        firing = [s for s in patched.sites if s.form in FIRING]
        sites_of = Counter(s.probe.spec for s in firing)
        # A record does not say which site fired: a probe with one site names it, others give None.
        self.single_site = {s.probe.spec: s.addr for s in firing if sites_of[s.probe.spec] == 1}

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
                self._arm(s)
            except SiteChanged as e:
                self.on_changed(s, e)
                continue
            self.armed.add(s.addr)
            armed += 1
        far = [s for s in sites if s.addr in self.trapped and s.addr not in self.out_of_range
               and self._wants_branch(s)]
        if far:
            self.out_of_range.update(s.addr for s in far)
            self.on_warning(f"{len(far)} site(s) are out of branch range of their recorder "
                            f"(e.g. {far[0].probe.spec} at {far[0].addr:#x}): armed with the breakpoint")
        self.sync_flag()
        return armed

    def set_mode(self, mode: str, rearm: bool = True) -> None:
        """Arm sites with ``mode`` from now on; with ``rearm``, the armed ones are rearmed that way."""
        if mode == BRANCH and self.data is None:
            raise SdtError("", "this image has no recorders, so it can only be armed with traps",
                           "rebuild it with this sdtgen's `gen`")
        armed = [self.sites[a] for a in sorted(self.armed)] if rearm else []
        rearmed = []
        for s in armed:
            self.armed.discard(s.addr)
            try:
                self._disarm(s)
                rearmed.append(s)
            except SiteChanged as e:  # left as the guest made it, and written no more
                self.on_changed(s, e)
        self.mode = mode
        for s in rearmed:
            try:
                self._arm(s)
                self.armed.add(s.addr)
            except SiteChanged as e:
                self.on_changed(s, e)
        self.sync_flag()

    def _wants_branch(self, site: PatchedSite) -> bool:
        """A firing site, branch mode, a recorder, and no --action on the probe (an action needs the host at
        each firing)."""
        return (site.form in FIRING and self.mode == BRANCH and self.data is not None
                and site.probe.stub in self.data.recorders
                and not any(pattern.matches(site.probe) for pattern, _, _ in self.actions))

    def _arm(self, site: PatchedSite) -> None:
        """Arm one site: a branch to its recorder where it reaches, else the breakpoint."""
        if self._wants_branch(site):
            code = self._branch_code(site)
            if code is not None:
                write_site(self.machine, site, code)
                return
        if site.form == COND:
            self._arm_stub(site)
        else:
            write_site(self.machine, site, site.armed)  # the breakpoint, or an is-enabled check's "1"
        if site.form in FIRING:
            self.trapped.add(site.addr)

    def _branch_code(self, site: PatchedSite) -> bytes | None:
        arch, recorder = self.machine.arch, self.data.recorders[site.probe.stub]
        if site.form == COND:  # the jcc goes to the recorder instead of the empty stub
            return arch.retarget(site.disabled, site.addr, recorder)
        return arch.branch_to(site.form, site.addr, site.length, recorder)

    def _disarm(self, s: PatchedSite) -> None:
        trapped = s.addr in self.trapped
        self.trapped.discard(s.addr)
        if s.form != COND or not trapped:
            write_site(self.machine, s, s.disabled)
        elif s.probe.stub in self.stub_traps and not any(
                self.sites[a].probe.stub == s.probe.stub for a in self.trapped if self.sites[a].form == COND):
            _, covered, bp = self.stub_traps.pop(s.probe.stub)
            write_code_verified(self.machine, s.probe.stub, bp, covered)

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
                self._disarm(s)
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
        if probe.spec in self.active:
            # The probe's own action reached it again: like kprobes, disarm it rather than recurse.
            self.disable(ProbeSpec.parse(probe.spec))
            self.on_warning(f"{probe.spec} fired again from its own action; disarmed it")
            return self._resume(m, site, addr)
        recorder = self.data.recorders.get(probe.stub) if self.data is not None else None
        if recorder is None:
            args = tuple(decode_arg(t, v, m) for t, v in zip(probe.args, raw, strict=True))
            self.hits[probe.spec] += 1
            self.on_fire(Firing(probe.spec, addr, args, probe.args, m.cpu if self.per_cpu else None))
        self.last_fired = probe.spec
        if recorder is not None and any(pattern.matches(probe) for pattern, _, _ in self.actions):
            # The firing is recorded (and shown) before the action runs, as the guest would order them.
            m.call_nested(recorder, raw)
            self.on_drain(m.cpu)
            recorder = None
        self._run_actions(m, probe, raw)
        if recorder is None:
            return self._resume(m, site, addr)
        # The same transport as branch mode: the guest enters the recorder as if the site had called it.
        arch.enter(m, recorder, None if site.form in RETURNS else addr + site.length)
        return recorder

    def _resume(self, m: Machine, site: PatchedSite, addr: int) -> int:
        """Where CPU ``m`` goes on after a firing the host recorded: past the site, or returning."""
        return m.arch.return_address(m) if site.form in RETURNS else addr + site.length

    def _run_actions(self, m: Machine, probe: TableProbe, raw: list[int]) -> None:
        for pattern, func, name in self.actions:
            if pattern.matches(probe):
                self.active.add(probe.spec)
                try:
                    value = m.call_nested(func, raw)
                    self.on_drain(m.cpu)  # what the action's own code recorded comes before its result
                    self.on_action(name, value)
                finally:
                    self.active.discard(probe.spec)

    def drain(self, cpu: int | None = None) -> list[Event]:
        """What the recorders wrote since the last drain, every CPU (or only ``cpu``) merged in timestamp order."""
        if self.data is None:
            return []
        streams = [decode(c, data, self.data.formats) for c, data in self.data.rings.drain(cpu)]
        self.lost = sum(self.data.rings.lost)
        if not streams:
            return []
        events = streams[0] if len(streams) == 1 else list(heapq.merge(*streams, key=lambda e: e.ts))
        self.hits.update(e.probe for e in events)
        self.last_fired = events[-1].probe
        return events

    def firing(self, e: Event) -> Firing:
        """A drained event as the reporter shows it (the site, when its probe has only one)."""
        return Firing(e.probe, self.single_site.get(e.probe), e.args, self.by_spec[e.probe].args, e.cpu, e.ts)
