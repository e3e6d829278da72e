"""`sdtgen torture --exhaustive`: every interleaving of one CPU's patching with another CPU's fetch, for one function.

For every site of the function, the control CPU makes every change the runtime makes to a site
(off to branch, branch to off, off to trap, trap to branch, branch to trap, trap to off; an
is-enabled check between result 0 and 1) through the image's own sdt_enable and sdt_disable. A
write hook stops the control CPU at every store it makes to code, before the store lands. There,
for every way the store's bytes can reach another CPU's instruction fetch (x86: any of its bytes in
any order, since no multi-byte instruction write is atomic for fetch; AArch64 and RISC-V: an aligned
store of up to four bytes whole or not at all), an observer CPU is started at every instruction
boundary of the site's old and new code, in memory as it is then, and runs one instruction. It must
be the old instruction, the new one, or the protocol's breakpoint, which sdt_trap (the runtime's
own, with the change in flight) must resolve (as the site's state: the old one until the change
commits); and it must not leave the CPU
inside the site at a byte where no instruction of either starts. Every store must lie inside a site,
and once the change is made every site must hold its new instruction whole.

With a module (--module): the changes are the module's own, with a spec covering it enabled in trap and then
in branch mode: sdt_module_unload disarming its armed sites (an observer on the breakpoint must be resolved
as the site's state, while the module is still the runtime's), and sdt_module_load arming them again as the
spec says (a load while a spec arms it).

With a keeping session (--keep SPEC): the host's own session holds SPEC's probes armed before the changes start,
and the changes are the default session's: a kept site must never be disarmed, neither by a store an observer
sees (running the site's disarmed instruction) nor once a change is made (``kept_disarmed`` counts both); its
changes between the arming modes are checked as any.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from sdtgen.errors import SdtError, printable
from sdtgen.table import TableSite
from sdtgen.targets.base import Summary
from sdtgen.targets.emulator.legit import legit_instructions
from sdtgen.targets.emulator.machine import GuestFault
from sdtgen.targets.emulator.runtime import MODES

MODULE_STEPS = (("trap", "sdt_module_unload"), ("trap", "sdt_module_load"), ("branch", "sdt_module_unload"),
                ("branch", "sdt_module_load"))
STEPS = (("sdt_enable", "branch"), ("sdt_disable", None), ("sdt_enable", "trap"), ("sdt_enable", "branch"),
         ("sdt_enable", "trap"), ("sdt_disable", None))
SCRATCH_STACK = 0x2000  # below the observer's stack top: where its one instruction may push


def landings(arch, address: int, data: bytes) -> list[list[tuple[int, int]]]:
    """The (address, byte) sets of one store of ``data`` at ``address`` that another CPU's fetch may see: each
    subset where the architecture's fetch may see a torn store (Arch.fetch_sees_torn_stores: x86), else all or
    none."""
    pairs = [(address + i, b) for i, b in enumerate(data)]
    if arch.fetch_sees_torn_stores and len(pairs) > 1:
        return [list(c) for n in range(len(pairs) + 1) for c in itertools.combinations(pairs, n)]
    return [[], pairs]


class Exhaustive:
    """The check on an emulated boot (sdtgen/targets/emulator/target.py) of two CPUs: the last makes the changes."""

    def __init__(self, target, symbol: str, module: bool = False, keep: str = "",
                 take: Callable[[], None] = lambda: None) -> None:
        self.target = target
        self.rt = target.runtime
        self.arch = target.image.arch
        self.control = target.smp.cpus[-1]
        self.observer = target.smp.cpus[0]
        self.summary = Summary(target.entries.protocol, 1, 0, keep=keep)
        self.module = target.module if module else None
        if self.module is not None:  # every site of the module
            lo, end = self.module.base, self.module.base + self.module.size
        else:
            sym = target.image.symbols[symbol]
            lo, end = sym.value, sym.value + max(sym.size, 1)
        self.sites = [s for s in self.rt.sites if lo <= s.addr < end and s.state == "off"]
        if not self.sites:
            raise SdtError(target.image.path, f"{printable(symbol)} has no probe site to check",
                           "name a function with SDT probes in it (see `sdtgen probes IMAGE`)")
        self.watched: list[tuple[TableSite, bytes, bytes]] = []  # during a change: (site, old, new)
        self.trapped: list[int] = []
        self.off = {s.addr: self.control.read(s.addr, s.size) for s in self.sites}  # each site disarmed
        self.kept: set[int] = set()  # the sites the keeping session holds armed
        if keep:
            take()
            self.rt.refresh()
            self.kept = {s.addr for s in self.rt.sites if s.addr in self.off and s.state in ("trap", "branch")}
            if not self.kept:
                raise SdtError(target.image.path, f"--keep {printable(keep)} keeps no site of {printable(symbol)}",
                               "give a spec of probes in the function checked")

    def run(self) -> Summary:
        more = ((self.module.text[0], self.module.text[0] + self.module.text[1]),) if self.module else ()
        self.control.watch_code_stores(self._store, more)
        self.rt.on_trap_result = self.trapped.append
        if self.module is not None:
            return self._module_run()
        for spec in sorted({s.probe.spec for s in self.sites}):
            mine = [s for s in self.sites if s.probe.spec == spec]
            for i, (entry, mode) in enumerate(STEPS):
                self._change(mine, spec, entry, mode, STEPS[i - 1] if i else ("sdt_disable", None))
        return self.summary

    def _change(self, sites: list[TableSite], spec: str, entry: str, mode: str | None,
                before: tuple[str, str | None]) -> None:
        """One change of every site of ``spec``, with the observer run at every store to one of ``sites``."""
        old = {s.addr: self.control.read(s.addr, s.size) for s in sites}
        args = [self.rt._spec(self.control, spec)] + ([MODES[mode]] if mode else [])
        # The new bytes: the change made once, read, and undone (the runtime's own output, not a copy of it).
        self._call(entry, args)
        new = {s.addr: self.control.read(s.addr, s.size) for s in sites}
        self._call(before[0], [self.rt._spec(self.control, spec)] + ([MODES[before[1]]] if before[1] else []))
        self.watched = [(s, old[s.addr], new[s.addr]) for s in sites]
        self._call(entry, args)
        self.watched = []
        for s in sites:  # every store of the change landed: the site is the new instruction, whole
            now = self.control.read(s.addr, s.size)
            if now != new[s.addr]:
                self.summary.torn += 1
            if s.addr in self.kept and now == self.off[s.addr]:
                self.summary.kept_disarmed += 1  # the default session's change took a site another keeps
        self.rt.refresh()

    def _module_run(self) -> Summary:
        """The module unloaded and loaded with a spec covering all of its probes enabled in each mode."""
        spec = f"{self.sites[0].probe.provider}:::"
        where, m = self.target.module_struct(), self.module
        calls = {"sdt_module_unload": [where], "sdt_module_load": [where, m.table, *m.text]}
        undo = {"sdt_module_unload": "sdt_module_load", "sdt_module_load": "sdt_module_unload"}
        for mode, entry in MODULE_STEPS:
            if entry == "sdt_module_unload":  # loaded: its sites armed as the spec says in this mode
                self._call("sdt_enable", [self.rt._spec(self.control, spec), MODES[mode]])
            mine = [s for s in self.sites if s.probe.provider == self.sites[0].probe.provider]
            old = {s.addr: self.control.read(s.addr, s.size) for s in mine}
            self._call(entry, calls[entry])  # the new bytes: the change made once, read, and undone
            new = {s.addr: self.control.read(s.addr, s.size) for s in mine}
            self._call(undo[entry], calls[undo[entry]])
            self.watched = [(s, old[s.addr], new[s.addr]) for s in mine]
            self._call(entry, calls[entry])
            self.watched = []
            self.summary.done += 1
            for s in mine:
                if self.control.read(s.addr, s.size) != new[s.addr]:
                    self.summary.torn += 1
        self.rt.refresh()
        return self.summary

    def _call(self, entry: str, args: list[int]) -> None:
        result = self.rt.call(self.control, entry, args)
        if result < 0:
            raise SdtError(self.target.image.path, f"the runtime refused {entry} (error {result})", "")

    # -- at every store --------------------------------------------------------------------------
    def _store(self, address: int, data: bytes) -> None:
        if self.watched and not any(x.addr <= address and address + len(data) <= x.addr + x.size
                                    for x in self.rt.sites):
            self.summary.faults += 1  # a store beyond every site: bytes of code the runtime did not verify
        for site, old, new in self.watched:
            if address < site.addr + site.size and site.addr < address + len(data):
                self._observe(site, old, new, address, data)


    def _observe(self, site: TableSite, old: bytes, new: bytes, address: int, data: bytes) -> None:
        m, s = self.control, site
        before = m.read(s.addr, s.size)
        legit = legit_instructions(self.arch, s.addr, old, new)
        boundaries = {a for a, _ in legit}
        try:
            for landed in landings(self.arch, address, data):
                state = bytearray(before)
                for a, b in landed:
                    if s.addr <= a < s.addr + s.size:
                        state[a - s.addr] = b
                m.write(s.addr, bytes(state))
                for p in sorted(boundaries):
                    self._run_one(s, p, legit, boundaries, new)
        finally:
            m.write(s.addr, before)
            self.observer.uc.ctl_flush_tb()

    def _run_one(self, site: TableSite, p: int, legit, boundaries: set[int], new: bytes) -> None:
        """The observer runs one instruction from ``p``; it must be a legitimate one, and land on one."""
        from unicorn import UC_HOOK_CODE

        o = self.observer
        o.uc.ctl_flush_tb()
        seen: list[tuple[int, int]] = []
        h = o.uc.hook_add(UC_HOOK_CODE, lambda uc, a, n, u: seen.append((a, n)) if not seen else None)
        o.model.set_call(o, p, [1, 2, 3, 4, 5, 6], o.exit_addr, o.stack_top - SCRATCH_STACK)
        self.trapped.clear()
        self.summary.checked += 1
        try:
            after = o.step_one(p)
        except GuestFault:
            self.summary.faults += 1
            return
        finally:
            o.uc.hook_del(h)
        if not seen:
            return
        a, n = seen[0]
        code = o.read(a, n)
        if site.addr in self.kept and a == site.addr and code == self.off[site.addr][:n]:
            self.summary.kept_disarmed += 1  # a CPU found a kept site disarmed while it changed
        if (a, code) not in legit:
            self.summary.torn += 1
            return
        if self.trapped and self.trapped[-1] not in (1, 2):  # a breakpoint: sdt_trap must resolve it
            self.summary.torn += 1
            return
        if self.trapped:
            self.summary.transient += 1
        end = site.addr + site.size
        if after is not None and site.addr < after < end and after not in boundaries:
            self.summary.torn += 1


def exhaustive(target, symbol: str, module: bool = False, keep: str = "",
               take: Callable[[], None] = lambda: None) -> Summary:
    return Exhaustive(target, symbol, module, keep, take).run()

