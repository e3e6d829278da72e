"""`sdtgen torture`: every CPU calls one function over and over while the host arms and disarms its probes.

What is toggled: every call, tail and is-enabled site inside the function.
Arming writes what the data path's branch arming writes, a call (or tail
jump) to the probe's recorder, so on x86 a toggle rewrites all five bytes of
a site, the case the protocol exists for; a site its recorder is out of
reach of gets the breakpoint, and an is-enabled check "result = 1". Firings
are what the recorders wrote into the CPUs' rings (with what a full ring
lost), plus breakpoint firings.

The host's writes interleave with the CPUs' quanta: the seed chooses how many
rounds run between toggles, and every store of a write is followed by a round
(sdtgen.boot.textpoke). An instruction hook on the sites' bytes, installed in
this mode only, compares every instruction a CPU executes there with the old
and the new instruction (and the protocol's own breakpoint at the site): any
other bytes are ``torn``. The bytes are read from memory in the hook, and they
are what the CPU translated: memory changes only between quanta, and every
change is followed by a flush of every CPU before any of them runs again.
``faults`` counts guest faults, wrong return values (against the value of the
same call on one CPU with nothing armed) and calls that never end.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field
from functools import partial

from sdtgen.arch.base import COND, ISEN, RETURNS
from sdtgen.boot.machine import GuestFault, Machine
from sdtgen.boot.patcher import PatchedSite
from sdtgen.boot.session import BootSession, Reporter
from sdtgen.boot.smp import Smp
from sdtgen.errors import SdtError, printable

GAP = 8  # the most rounds the CPUs run between two toggles
CALL_ROUNDS = 20000  # rounds a call may take before it counts as a fault (a torn branch may loop)


@dataclass
class Summary:
    protocol: str
    cpus: int
    toggles: int
    calls: int = 0
    firings: int = 0
    faults: int = 0
    torn: int = 0
    transient: int = 0  # traps on the protocol's transient breakpoint (the protocol was exercised)
    per_cpu_calls: list[int] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.faults == 0 and self.torn == 0

    def as_dict(self) -> dict:
        return {"protocol": self.protocol, "cpus": self.cpus, "toggles": self.toggles, "calls": self.calls,
                "firings": self.firings, "faults": self.faults, "torn": self.torn}

    def text(self) -> str:
        verdict = "ok" if self.passed else "FAILED"
        cpus = f"{self.cpus} CPU" + ("s" if self.cpus != 1 else "")
        return (f"{verdict}: {self.protocol} protocol, {cpus}, {self.toggles} toggles: {self.calls} calls, "
                f"{self.firings} firings, {self.faults} faults, {self.torn} torn")


@dataclass
class Toggled:
    site: PatchedSite
    off: bytes  # the disabled bytes
    on: bytes  # the armed bytes
    legit: frozenset[tuple[int, bytes]]  # (address, bytes) of every instruction a CPU may execute in the site
    target: int | None  # armed, the site branches here (its recorder); None: it holds the breakpoint


class Torture:
    def __init__(self, session: BootSession, func: int, args: list[int], toggles: int, timeout: float) -> None:
        self.session = session
        self.smp = session.smp
        self.machine = session.machine
        self.arch = self.machine.arch
        self.func, self.args = func, args
        self.toggles = toggles
        self.timeout = timeout
        self.summary = Summary(self.smp.poke.protocol, len(self.smp.cpus), toggles)
        self.sites: dict[int, Toggled] = {}
        self.mask = (1 << self.arch.bits) - 1
        self.expected = 0
        self.rounds: list[int] = []
        self.calls: list[int] = []

    # -- setting up ------------------------------------------------------------------
    def prepare(self, symbol: str) -> None:
        """The sites to toggle, the reference value (before anything is armed), the traps and hooks."""
        sym = self.session.image.symbols[symbol]
        end = sym.value + max(sym.size, 1)
        for s in self.session.patch.sites:
            if sym.value <= s.addr < end and s.form != COND and s.usable:
                target, on = self._armed(s)
                self.sites[s.addr] = Toggled(s, s.disabled, on, self._legit(s.addr, s.disabled, on), target)
        if not self.sites:
            raise SdtError(self.session.image.path, f"{printable(symbol)} has no probe site to toggle",
                           "name a function with SDT probes in it (see `sdtgen probes IMAGE`)")
        try:
            self.expected = self.reference() & self.mask
        except GuestFault as e:
            raise SdtError(self.session.image.path, f"{printable(symbol)} faults on one CPU with nothing armed: "
                           f"{e.what} at {e.pc:#x}", "give arguments the function accepts") from None
        for m in self.smp.cpus:
            m.trap = partial(self._trap, m)
            self._hook(m)

    def _armed(self, s: PatchedSite) -> tuple[int | None, bytes]:
        """(where the armed site branches, the armed bytes): a call (or tail jump) to the probe's recorder, as
        the data path's branch arming writes it, where it reaches; else the breakpoint. An is-enabled check
        toggles between result 0 and 1."""
        if s.form == ISEN:
            return None, s.armed
        data = self.session.runtime.data
        recorder = data.recorders.get(s.probe.stub) if data is not None else None
        if recorder is not None:
            code = self.arch.branch_to(s.form, s.addr, s.length, recorder)
            if code is not None:
                return recorder, code
        return None, s.armed

    def _legit(self, addr: int, off: bytes, on: bytes) -> frozenset[tuple[int, bytes]]:
        cs = self.arch.capstone()
        legit = {(addr, self.arch.breakpoint(2))}  # the protocol's transient breakpoint
        for code in (off, on):
            for a, size, _, _ in cs.disasm_lite(code, addr):
                legit.add((a, code[a - addr:a - addr + size]))
            if code[:len(self.arch.breakpoint(len(code)))] == self.arch.breakpoint(len(code)):
                legit.add((addr, self.arch.breakpoint(len(code))))
        return frozenset(legit)

    def _hook(self, m: Machine) -> None:
        from unicorn import UC_HOOK_CODE

        for addr, t in self.sites.items():
            m.uc.hook_add(UC_HOOK_CODE, self._fetched, t, addr, addr + len(t.on) - 1)

    def _fetched(self, uc, address: int, size: int, t: Toggled) -> None:
        code = self.machine.read(address, size)
        if (address, code) not in t.legit:
            self.summary.torn += 1

    # -- traps -----------------------------------------------------------------------
    def _trap(self, m: Machine, addr: int) -> int:
        t = self.sites.get(addr)
        if t is None:
            raise GuestFault("breakpoint trap outside every site", addr)
        new = self.smp.poke.in_flight.get(addr)
        if new is not None:
            self.summary.transient += 1
        else:  # the breakpoint is the site's own: armed in trap mode
            new = self.machine.read(addr, len(t.on))
            if new != t.on or t.target is not None or t.site.form == ISEN:
                raise GuestFault("breakpoint trap at a site that is not armed", addr)
        return self._as_if(m, t, new)

    def _as_if(self, m: Machine, t: Toggled, new: bytes) -> int:
        """Go on as if ``new`` were the site's instruction (a CPU on a transient breakpoint does)."""
        site = t.site
        if site.form == ISEN:  # "result = 0 or 1": what the new instruction would leave in the result register
            m.uc.reg_write(self.arch.regs.ret, int(new == t.on))
            return site.addr + site.length
        if new == t.on and t.target is not None:  # the call (or tail jump) being written: make it
            self.arch.enter(m, t.target, None if site.form in RETURNS else site.addr + site.length)
            return t.target
        if new == t.on:
            self.summary.firings += 1
        elif new != t.off:
            raise GuestFault("breakpoint trap during a write of unknown bytes", site.addr)
        return self.arch.return_address(m) if site.form in RETURNS else site.addr + site.length

    # -- running ---------------------------------------------------------------------
    def reference(self) -> int:
        """The call's value on one CPU with nothing armed: what every torture call must return."""
        return self.machine.call(self.func, self.args, timeout=self.timeout)

    def run(self) -> Summary:
        """Toggle the sites ``toggles`` times while every CPU calls the function; then let the calls end."""
        rng, poke = self.smp.rng, self.smp.poke
        self.rounds = [0] * len(self.smp.cpus)
        self.calls = [0] * len(self.smp.cpus)
        for m in self.smp.cpus:
            m.begin_call(self.func, self.args)
        deadline = time.monotonic() + self.timeout
        running = list(range(len(self.smp.cpus)))
        armed = False
        for _ in range(self.toggles):
            for _ in range(rng.randint(0, GAP)):
                self._round(running, again=True)
            armed = not armed
            for addr, t in self.sites.items():
                old, new = (t.off, t.on) if armed else (t.on, t.off)
                if self.machine.read(addr, len(new)) != old:
                    raise SdtError(self.session.image.path, f"the site at {addr:#x} changed under the torture test")
                for _ in poke.steps(addr, new):
                    self._round(running, again=True)
                t.site.current = new
            if time.monotonic() > deadline:
                self.summary.faults += 1
                break
        while running:  # every CPU finishes the call it is in
            self._round(running, again=False)
        # Firings through recorders are in the CPUs' rings (a full ring counts what it lost).
        self.summary.firings += len(self.session.runtime.drain()) + self.session.runtime.lost
        self.summary.calls = sum(self.calls)
        self.summary.per_cpu_calls = self.calls
        return self.summary

    def _round(self, running: list[int], again: bool) -> None:
        """One quantum on every running CPU; a CPU whose call ended is checked, then called again or retired."""
        for k in list(running):
            m = self.smp.cpus[k]
            try:
                done = m.step(self.smp.quantum())
                self.rounds[k] += 1
                if not done and self.rounds[k] < CALL_ROUNDS:
                    continue
                if not done or m.uc.reg_read(m.arch.regs.ret) & self.mask != self.expected:
                    self.summary.faults += 1
            except GuestFault:
                self.summary.faults += 1
            self.calls[k] += 1
            self.rounds[k] = 0
            if again:
                m.begin_call(self.func, self.args)
            else:
                running.remove(k)


def torture(path: str, symbol: str, args: list[int], cpus: int, toggles: int, protocol: str, seed: int,
            timeout: float) -> Summary:
    """Boot ``path`` on ``cpus`` CPUs and run the torture test; the summary."""
    session = BootSession(path, Reporter(as_json=True, out=io.StringIO()), timeout=timeout, cpus=cpus, seed=seed)
    try:
        func, _ = session.check_run(symbol, args)
        if session.smp is None:  # one CPU: the host's writes still interleave with it
            session.smp = Smp(session.machine, 1, seed)
        session.smp.poke.protocol = protocol
        t = Torture(session, func, args, toggles, timeout)
        t.prepare(symbol)
        return t.run()
    finally:
        session.close()
