"""The host's side of the runtime in the guest: its entry points called, its breakpoints delivered.

The image's own runtime (sdtgen/runtime/, linked into it) patches, arms and records; the host only
does what a kernel does around it: calls sdt_init, sdt_enable, sdt_disable, sdt_set_mode and
sdt_flush on a CPU, hands every breakpoint that is not the platform's own to sdt_trap with the trap
frame and resumes where it says, and carries out the platform hooks that trap (sync_cores,
notify, report). --action functions are the host's addition: a probe with one is armed with the
breakpoint, and after sdt_trap recorded a firing the host calls the action in the guest.
"""

from __future__ import annotations

from collections.abc import Callable

from sdtgen.arch.base import TAIL
from sdtgen.errors import SdtError
from sdtgen.layout import ERRORS, VALUES
from sdtgen.plaindata import factory, record
from sdtgen.probes import ProbeSpec
from sdtgen.table import Bounds, TableError, TableProbe, TableSite, module_sites, read_tables
from sdtgen.targets.base import BRANCH, TRAP
from sdtgen.targets.emulator.fast_unicorn import register_reader
from sdtgen.targets.emulator.machine import GuestFault, Machine
from sdtgen.targets.emulator.platform import MAX_SPEC_BYTES, Entries, Platform

MODES = {TRAP: VALUES["SDT_TRAP"], BRANCH: VALUES["SDT_BRANCH"]}
NOT_OURS, FIRED = VALUES["SDT_TRAP_NOT_OURS"], VALUES["SDT_TRAP_FIRED"]


@record
class Report:
    """A line the runtime reported, and the site entry it is about (its address, or 0)."""

    site: int
    line: str


@record
class InitResult:
    sites: list[TableSite]  # every entry, with the state sdt_init left it in
    reports: list[Report] = factory(list)

    def of(self, state: str) -> list[TableSite]:
        return [s for s in self.sites if s.state == state]


class ProbeRuntime:
    """The runtime of an image booted on ``machines`` (CPU 0 first) with ``platform``'s hooks."""

    def __init__(self, machines: list[Machine], platform: Platform, entries: Entries, bounds: Bounds) -> None:
        self.machines = machines
        self.platform = platform
        self.entries = entries
        self.bounds = bounds
        self.arch = machines[0].arch
        self.model = machines[0].model
        self.bp_len = len(self.arch.breakpoint(4))
        self.reports: list[Report] = []
        self.sites: list[TableSite] = []
        self.by_addr: dict[int, TableSite] = {}
        self.modules: dict[str, Bounds] = {}  # the loaded modules' tables, by module name
        self.mode = TRAP
        # Guest functions called when a probe fires (--action), and the probes whose action is running on
        # each CPU: another CPU firing the probe meanwhile is a firing, not the action reaching it again.
        self.actions: list[tuple[ProbeSpec, int, str]] = []
        self.active: set[tuple[int, str]] = set()
        self.on_packets: Callable[[int], None] = lambda cpu: None  # consume CPU's closed packets
        self.on_area: Callable[[int], None] = lambda area: None  # a session's area (not the default's) closed one
        self.scope_struct = 0  # the struct sdt_session enable and disable act on (0: the default session's entries)
        self.on_fired: Callable[[Machine], None] = lambda m: None  # a firing an action follows: show it first
        self.on_warning: Callable[[str], None] = lambda text: None
        self.on_action: Callable[[Machine, str, int], None] = lambda m, name, value: None
        self.sync: Callable[[Machine], None] = self.flush_all
        self.on_trap_result: Callable[[int], None] = lambda result: None  # what sdt_trap said (torture counts)
        self.on_report: Callable[[int, str], None] = lambda site, line: None  # a line of the runtime's log
        regs = self.model.regs  # the registers a trap frame carries, read in one call a trap
        frame = [("pc", regs.pc), ("sp", regs.sp), ("ret", regs.ret), ("flags", regs.flags), ("link", regs.link)]
        frame += [(f"arg[{k}]", r) for k, r in enumerate(regs.args)]
        frame = [(name, r) for name, r in frame if r is not None]
        self._frame_names = [name for name, _ in frame]
        self._frame_regs = {m.cpu: register_reader(m.uc, [r for _, r in frame]) for m in machines}
        for m in machines:
            m.trap = self._trap_handler(m)

    def _trap_handler(self, m: Machine) -> Callable[[int], int]:
        return lambda addr: self.trap(m, addr)

    # -- calling the runtime ------------------------------------------------------------------
    def call(self, m: Machine, name: str, args: list[int]) -> int:
        """Call entry point ``name`` on CPU ``m``; its int result. Inside a trap, a nested call."""
        raw = m.call_nested(self.entries[name], args) if m.depth else m.call(self.entries[name], args)
        raw &= 0xFFFFFFFF
        return raw - (1 << 32) if raw & 0x80000000 else raw

    def _spec(self, m: Machine, spec: str) -> int:
        data = spec.encode("utf-8", "replace")
        if len(data) > MAX_SPEC_BYTES or b"\0" in data:
            raise SdtError("", f"probe spec {spec!r} cannot be passed to the runtime",
                           f"give at most {MAX_SPEC_BYTES} bytes and no NUL")
        where = self.platform.spec_buffer(m.cpu)
        m.write(where, data + b"\0")
        return where

    def _check(self, result: int, what: str) -> int:
        if result < 0:
            raise SdtError("", f"the runtime refused to {what}: {ERRORS.get(result, f'error {result}')}")
        return result

    def init(self) -> InitResult:
        """sdt_init on CPU 0: every site verified and written (or refused); the table as it left it."""
        self.reports.clear()
        patched = self.call(self.machines[0], "sdt_init", [self.platform.hooks_address])
        if patched < 0:
            raise SdtError("", "the runtime found the probe tables corrupt (sdt_init refused them)",
                           "regenerate them with `sdtgen gen` and relink")
        self.refresh()
        return InitResult(self.sites, list(self.reports))

    def refresh(self) -> None:
        """The site table as the runtime keeps it in guest memory (sorted, with states and lengths)."""
        try:
            self.sites = read_tables(self.machines[0].read, self.bounds, self.arch.bits, self.arch.little)
            for name, bounds in self.modules.items():
                self.sites += module_sites(self.machines[0].read, bounds, name, self.arch.bits, self.arch.little)
        except (TableError, GuestFault) as e:
            raise SdtError("", f"the probe table in memory is corrupt: {e}", "the guest wrote over it") from None
        self.by_addr = {}
        for s in self.sites:
            self.by_addr.setdefault(s.addr, s)

    def load_module(self, name: str, bounds: Bounds, args: list[int]) -> int:
        """sdt_module_load on CPU 0 (``args``: the struct sdt_module, the table, the text and its size); the sites
        it patched. Its table is read with the kernel's from then on."""
        n = self._check(self.call(self.machines[0], "sdt_module_load", args), f"load module {name}")
        self.modules[name] = bounds
        self.refresh()
        return n

    def unload_module(self, name: str, module: int) -> int:
        """sdt_module_unload on CPU 0; the sites it disarmed."""
        n = self._check(self.call(self.machines[0], "sdt_module_unload", [module]), f"unload module {name}")
        self.modules.pop(name, None)
        self.refresh()
        return n

    def _arming(self, m: Machine, enable: bool, text: str, mode: int = 0) -> int:
        """sdt_enable or sdt_disable, or the session's (sdt_session_enable, ...) when one is in scope."""
        args = [self._spec(m, text)] + ([mode] if enable else [])
        name = "sdt_enable" if enable else "sdt_disable"
        if self.scope_struct:
            return self.call(m, name.replace("sdt_", "sdt_session_"), [self.scope_struct, *args])
        return self.call(m, name, args)

    def enable(self, pattern: ProbeSpec, text: str) -> int:
        m = self.machines[0]
        n = self._check(self._arming(m, True, text, MODES[self.mode]), f"enable {text!r}")
        self._trap_actions()
        self.refresh()
        return n

    def disable(self, pattern: ProbeSpec, text: str, m: Machine | None = None) -> int:
        m = m or self.machines[0]
        n = self._check(self._arming(m, False, text), f"disable {text!r}")
        self.refresh()
        return n

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self._check(self.call(self.machines[0], "sdt_set_mode", [MODES[mode]]), f"arm with {mode}")
        self._trap_actions()
        self.refresh()

    def _trap_actions(self) -> None:
        """A probe with an action is armed with the breakpoint whatever the mode: the host must see it fire."""
        if self.mode == BRANCH:
            m = self.machines[0]
            for pattern, _, _ in self.actions:
                text = ":".join(pattern.fields)
                self._arming(m, True, text, MODES[TRAP])

    def flush(self, m: Machine) -> None:
        """sdt_flush on CPU ``m``: its open packet closed (and, through notify, consumed)."""
        self.call(m, "sdt_flush", [])

    def flush_all(self, m: Machine) -> None:
        """sync_cores on the emulator: every CPU drops its translations (the icache), so it fetches anew."""
        for other in self.machines:
            other.uc.ctl_flush_tb()

    def matching(self, pattern: ProbeSpec) -> list[TableSite]:
        return [s for s in self.sites if s.state in ("off", "trap", "branch") and pattern.matches(s.probe)]

    def probes(self) -> list[TableProbe]:
        seen: dict[int, TableProbe] = {}
        for s in self.sites:
            seen.setdefault(s.probe.addr, s.probe)
        return sorted(seen.values(), key=lambda p: (p.spec, p.addr))

    def armed(self) -> list[TableSite]:
        return [s for s in self.sites if s.state in ("trap", "branch")]

    # -- traps ---------------------------------------------------------------------------------
    def trap(self, m: Machine, addr: int) -> int:
        """A breakpoint on CPU ``m`` at ``addr``; where it resumes."""
        hook = self.platform.hook_at(addr)
        if hook is not None:
            self._hook(m, hook)
            return addr + self.bp_len
        site = self.by_addr.get(addr)
        actions = [(f, n) for p, f, n in self.actions if site is not None and p.matches(site.probe)]
        if actions and (m.cpu, site.probe.spec) in self.active:
            # The probe's own action reached it again: like kprobes, disarm it rather than recurse.
            self.disable(ProbeSpec.parse(site.probe.spec), site.probe.spec, m)
            self.on_warning(f"{site.probe.spec} fired again from its own action; disarmed it")
            return addr  # the site now holds its disabled form
        raw = self.model.args_at_site(m, len(site.probe.args), site.form) if actions else []
        result, pc = self._deliver(m)
        if result == NOT_OURS:
            raise GuestFault("breakpoint trap that is not a probe site's (sdt_trap says not its own)", addr)
        if result == FIRED and actions:
            self.on_fired(m)  # the firing is recorded and shown before the action runs
            self._act(m, site, actions, raw)
        return pc

    def _deliver(self, m: Machine) -> tuple[int, int]:
        """sdt_trap(frame) on CPU ``m`` as the kernel's breakpoint handler calls it; (result, resume pc)."""
        regs, uc, p = self.model.regs, m.uc, self.platform
        values = dict(zip(self._frame_names, self._frame_regs[m.cpu](), strict=True))
        m.write(p.frame(m.cpu), p.frame_bytes(values))
        result = self.call(m, "sdt_trap", [p.frame(m.cpu)])
        self.on_trap_result(result)
        out = p.read_frame(m, m.cpu)
        if result != NOT_OURS:
            mask = (1 << self.arch.bits) - 1
            uc.reg_write(regs.sp, out["sp"] & mask)
            uc.reg_write(regs.ret, out["ret"] & mask)
            if regs.link is not None:
                uc.reg_write(regs.link, out["link"] & mask)
        return result, out["pc"] & ((1 << self.arch.bits) - 1)

    def _hook(self, m: Machine, name: str) -> None:
        a0, a1 = self.model.args_at_site(m, 2, TAIL)  # at a function's first instruction
        if name == "sync_cores":
            self.sync(m)
        elif name == "notify":
            cpu = self.platform.cpu_of_area(a0)
            if cpu is not None:
                self.on_packets(cpu)
            else:
                self.on_area(a0)
        elif name == "report":
            from sdtgen.table import read_string

            try:
                line = read_string(m.read, a1)
            except TableError:
                line = "(an unreadable report)"
            self.reports.append(Report(a0, line))
            self.on_report(a0, line)

    def _act(self, m: Machine, site: TableSite, actions: list[tuple[int, str]], raw: list[int]) -> None:
        spec = site.probe.spec
        for func, name in actions:
            self.active.add((m.cpu, spec))
            try:
                value = m.call_nested(func, raw)
                self.on_fired(m)  # what the action's own code recorded comes before its result
                self.on_action(m, name, value)
            finally:
                self.active.discard((m.cpu, spec))

