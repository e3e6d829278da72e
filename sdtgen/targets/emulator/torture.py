"""`sdtgen torture`: CPUs call one function over and over while a control CPU arms and disarms its probes.

The product's own runtime does every write: a control CPU (one more engine) calls the image's
sdt_enable and sdt_disable (branch mode) for the probes with sites in the function, interleaved
with the other CPUs in seeded quanta, so the same seed replays the same run. The patch protocol is
the one the image's runtime was built with (a runtime built with -DSDT_NAIVE_PROTOCOL writes bytes
in place: `torture` says which it ran).

What counts. Every store the runtime makes to a site is made visible to every CPU at once (their
translations of it are dropped as it lands: the most a CPU can see), and an instruction hook on the
sites' bytes, installed in this mode only, compares every instruction a CPU executes there with the
site's instructions in its two states (read from memory after the runtime wrote each) and the
protocol's transient breakpoint: anything else is ``torn``. ``faults`` counts guest faults and calls
returning another value than the same call on one CPU with nothing armed. ``firings`` are the
events the recorders wrote (and what full rings lost); ``transient`` the traps on a breakpoint the
protocol had in flight. From a disable's (or an unload's) return to the next arm, every site must run
disarmed: a window in which a CPU ran a site whose bytes are not its disarmed ones is ``leaked``.

``exhaustive``: for every site of the function and every change the runtime makes to it, at every
store the runtime makes, another CPU is started at every instruction boundary in the site (and
every byte of it is tried) in the memory as it is then, with the store's bytes landed in every
order a CPU could see them land, and must execute the old instruction, the new one, or the
breakpoint that sdt_trap resolves as the new one.

``module`` (a module loaded with --module, --arm module): the spec stays enabled (branch) and the control CPU
unloads the module (sdt_module_unload: its sites disarmed while the CPUs run them) and loads it again in place
(sdt_module_load: its sites verified again and armed by the spec) in turn, while every CPU calls the module's
function; its sites are watched as any.

``keep`` (--keep SPEC): the host's own session holds SPEC's probes (an aggregation counting their firings, armed
after the reference call and the sites' two states are read) while the default session toggles: a kept site must
run armed at every fetch (``kept_disarmed`` counts the fetches that found it disarmed), its disarmed windows are no
leak, and every call of the workers fires the kept probes in full (``kept_calls``; the count is the session's).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sdtgen.errors import SdtError, printable
from sdtgen.plaindata import record
from sdtgen.table import TableSite
from sdtgen.targets.base import Summary
from sdtgen.targets.emulator.legit import legit_instructions
from sdtgen.targets.emulator.machine import GuestFault, Machine

GAP = 8  # the most rounds the CPUs run between two toggles
CALL_ROUNDS = 20000  # rounds a call may take before it counts as a fault (a torn branch may loop)


@record
class Watched:
    site: TableSite
    legit: frozenset[tuple[int, bytes]]  # (address, bytes) of every instruction a CPU may execute in the site
    off: bytes  # the site disarmed, as the runtime writes it
    kept: bool = False  # another session holds it armed throughout


class Torture:
    """Torture on an emulated boot (sdtgen/targets/emulator/target.py) of one more CPU than calls: the last toggles."""

    def __init__(self, target, func: int, args: list[int], mask: int, toggles: int, timeout: float,
                 spec: str, mode: str = "branch", progress: Callable[[int], None] = lambda done: None,
                 keep: str = "", take: Callable[[], None] = lambda: None) -> None:
        self.target = target
        self.smp = target.smp
        self.workers = self.smp.cpus[:-1]
        self.control = self.smp.cpus[-1]
        self.arch = target.image.arch
        self.func, self.args, self.mask = func, args, mask
        self.toggles = toggles
        self.timeout = timeout
        self.spec = spec
        self.mode = mode
        self.progress = progress  # told the toggles made, after each
        self.summary = Summary(target.entries.protocol, len(self.workers), toggles, keep=keep)
        self.keep, self.take = keep, take
        self.sites: dict[int, Watched] = {}
        self.expected = 0
        self.module = target.module if mode == "module" else None  # the LinkedModule cycled
        self.disarmed = False  # a disarm (or an unload) returned, and the next arm has not begun
        self._leaked = False  # a CPU ran an armed site in this disarmed window

    # -- setting up ------------------------------------------------------------------------
    def prepare(self, symbol: str) -> None:
        """The sites, their two states as the runtime writes them, the reference value, the hooks; then the keeping
        session takes its probes (in its own scope: every toggle here and in run is the default session's)."""
        with self.target.scoped(None):
            self._prepare(symbol)
        if self.keep:
            self.take()
            rt = self.target.runtime
            rt.refresh()
            armed = {s.addr for s in rt.sites if s.state in ("trap", "branch")}
            for w in self.sites.values():
                w.kept = w.site.addr in armed
            if not any(w.kept for w in self.sites.values()):
                raise SdtError(self.target.image.path, f"--keep {printable(self.keep)} keeps no site of "
                               f"{printable(symbol)}", "give a spec of probes in the function under torture")

    def _prepare(self, symbol: str) -> None:
        image = self.target.image
        rt = self.target.runtime
        if self.module is not None:  # every site of the module, armed by the spec
            lo, end = self.module.base, self.module.base + self.module.size
            self._toggle_now(False)
        else:
            sym = image.symbols[symbol]
            lo, end = sym.value, sym.value + max(sym.size, 1)
        inside = [s for s in rt.sites if lo <= s.addr < end and s.state == "off"]
        if not inside:
            raise SdtError(image.path, f"{printable(symbol)} has no probe site to toggle",
                           "name a function with SDT probes in it (see `sdtgen probes IMAGE`)")
        try:
            self.expected = self.reference()
        except GuestFault as e:
            raise SdtError(image.path, f"{printable(symbol)} faults on one CPU with nothing armed: "
                           f"{e.what} at {e.pc:#x}", "give arguments the function accepts") from None
        off = {s.addr: self.control.read(s.addr, s.size) for s in inside}
        self._toggle_now(True)
        on = {s.addr: self.control.read(s.addr, s.size) for s in inside}
        self._toggle_now(False)
        for s in inside:
            self.sites[s.addr] = Watched(s, legit_instructions(self.arch, s.addr, off[s.addr], on[s.addr]), off[s.addr])
        if self.module is not None:
            self._toggle_now(True)  # enabled throughout: each load arms the module again
        rt.on_trap_result = self._trap_result
        for m in self.workers:
            self._hook(m)
        self._watch_stores()

    def reference(self) -> int:
        """The call's value on one CPU with nothing armed: what every torture call must return."""
        return self.workers[0].call(self.func, self.args, timeout=self.timeout) & self.mask

    def _toggle_now(self, arm: bool) -> None:
        if arm:
            self.target.enable(self.spec, "branch" if self.mode == "module" else self.mode)
        else:
            self.target.disable(self.spec)

    def _hook(self, m: Machine) -> None:
        from unicorn import UC_HOOK_CODE

        for addr, w in self.sites.items():
            m.uc.hook_add(UC_HOOK_CODE, self._fetched, w, addr, addr + w.site.size - 1)

    def _fetched(self, uc, address: int, size: int, w: Watched) -> None:
        if (address, self.control.read(address, size)) not in w.legit:
            self.summary.torn += 1
        if w.kept:
            if address == w.site.addr and self.control.read(w.site.addr, w.site.size) == w.off:
                self.summary.kept_disarmed += 1  # another session's disarm took the site this one keeps
        elif self.disarmed and self.control.read(w.site.addr, w.site.size) != w.off:
            self._leaked = True  # the disarm returned, and the site is armed still: it fires while disarmed

    def _window(self, disarmed: bool) -> None:
        """A disarmed window opens (the disarm returned) or closes (an arm begins): each counted, and a leak in it."""
        if self.disarmed and not disarmed:
            self.summary.windows += 1
            self.summary.leaked += self._leaked
        self.disarmed, self._leaked = disarmed, False

    def _watch_stores(self) -> None:
        """Every store the control CPU makes to code: every other CPU's translations dropped as it lands."""
        text = self.module.text if self.module is not None else None
        self.control.watch_code_stores(self._stored, ((text[0], text[0] + text[1]),) if text else ())

    def _stored(self, address: int, data: bytes) -> None:
        for m in self.workers:
            m.uc.ctl_flush_tb()

    def _trap_result(self, result: int) -> None:
        if result == 2:  # SDT_TRAP_EMULATED: a breakpoint of a patch in flight
            self.summary.transient += 1

    # -- running -----------------------------------------------------------------------------
    def run(self) -> Summary:
        """Toggle ``toggles`` times while every worker calls the function; then let the calls end."""
        rng = self.smp.rng
        calls = [0] * len(self.workers)
        rounds = [0] * len(self.workers)
        for m in self.workers:
            m.begin_call(self.func, self.args)
        deadline = time.monotonic() + self.timeout
        running = list(range(len(self.workers)))
        rt = self.target.runtime
        modes = {"trap": 1, "branch": 2}
        for t in range(self.toggles):
            for _ in range(rng.randint(0, GAP)):
                self._round(running, calls, rounds, again=True)
            arm = t % 2 == 0
            arming = arm != (self.module is not None)  # an enable, or a load (the spec armed throughout)
            if arming:
                self._window(False)
            if self.module is not None:  # unload, then load it again where it is
                where = self.target.module_struct()
                name = "module_unload" if arm else "module_load"
                args = [where] if arm else [where, self.module.table, *self.module.text]
            else:
                name = "sdt_enable" if arm else "sdt_disable"
                args = [rt._spec(self.control, self.spec)] + ([modes[self.mode]] if arm else [])
            self.control.begin_call(self.target.entries[name if name.startswith("sdt_") else f"sdt_{name}"], args)
            while not self._control_step():
                self._round(running, calls, rounds, again=True)
            if not arming:  # a disable, or an unload, returned
                self._window(True)
            self.summary.done += 1
            self.progress(self.summary.done)
            if time.monotonic() > deadline:
                self.summary.timed_out = True
                break
        if self.summary.done % 2 and self.module is not None:  # leave the module loaded
            self.control.begin_call(self.target.entries["sdt_module_load"],
                                    [self.target.module_struct(), self.module.table, *self.module.text])
            while not self._control_step():
                self._round(running, calls, rounds, again=True)
        elif self.summary.done % 2:  # leave every site disarmed
            self.control.begin_call(self.target.entries["sdt_disable"], [rt._spec(self.control, self.spec)])
            while not self._control_step():
                self._round(running, calls, rounds, again=True)
        while running:  # every CPU finishes the call it is in
            self._round(running, calls, rounds, again=False)
        self._window(False)
        rt.refresh()
        if self.keep:  # the host reads the keeping session: the default session's records are counted here
            self._count_default()
        self.target.drain()  # the records go to the host, which counts them: the summary adds what full rings lost
        self.summary.firings += self.target.consumer.total_lost
        self.summary.calls = sum(calls)
        self.summary.kept_calls = self.summary.calls if self.keep else 0
        self.summary.idle = sum(1 for n in calls if n == 0)
        return self.summary

    def _count_default(self) -> None:
        """The default session's records (the toggled probes' firings in its armed windows), counted by the
        events each of its packets says it holds."""
        from sdtgen.transport.consumer import events_in

        consumer = self.target.consumer
        taker = consumer.on_packet

        def count(cpu: int, data: bytes, *seq: int) -> bool:
            self.summary.firings += events_in(data, self.arch.bits, self.arch.little)
            return True

        consumer.on_packet = count
        try:
            for m in self.smp.cpus:
                rt = self.target.runtime
                rt.call(m, "sdt_flush", [])
                consumer.consume(m.cpu)
        finally:
            consumer.on_packet = taker

    def _control_step(self) -> bool:
        try:
            done = self.control.step(self.smp.quantum())
        except GuestFault as e:
            raise SdtError(self.target.image.path, f"the runtime faulted on the control CPU: {e.what} at {e.pc:#x}",
                           "") from None
        if done:
            result = self.control.uc.reg_read(self.control.model.regs.ret) & 0xFFFFFFFF
            if result & 0x80000000:
                raise SdtError(self.target.image.path, "the runtime refused to arm or disarm the probes under "
                               f"torture (error {result - (1 << 32)})", "")
        return done

    def _round(self, running: list[int], calls: list[int], rounds: list[int], again: bool) -> None:
        """One quantum on every running CPU; a CPU whose call ended is checked, then called again or retired."""
        for k in list(running):
            m = self.workers[k]
            try:
                done = m.step(self.smp.quantum())
                rounds[k] += 1
                if not done and rounds[k] < CALL_ROUNDS:
                    continue
                if not done:
                    self.summary.faults += 1
                elif m.uc.reg_read(m.model.regs.ret) & self.mask != self.expected:
                    self.summary.wrong += 1
            except GuestFault:
                self.summary.faults += 1
            calls[k] += 1
            rounds[k] = 0
            if again:
                m.begin_call(self.func, self.args)
            else:
                running.remove(k)
