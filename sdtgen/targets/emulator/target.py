"""The emulated boot as a target: the image loaded in Unicorn, its runtime given a platform, its CPUs engines.

The image's own runtime patches, arms and records; this target does only what a kernel does around it
(this package: the machine, the CPUs, the platform's hooks, the calls into the runtime; and
sdtgen/transport/'s consumer reading rings from guest memory). Packets reach the session as they close
(the notify hook) with --overflow drop, or when a command ends. What the emulator alone can do is here
too: --action (a guest function called when a probe fires, armed with the breakpoint so the host sees it),
the seeded schedule, and the torture test that sees every instruction a CPU fetches in a site.
"""

from __future__ import annotations

from contextlib import contextmanager

from sdtgen.errors import SdtError, printable
from sdtgen.limits import MAX_RINGS
from sdtgen.probes import ProbeSpec
from sdtgen.targets.base import (
    ACTIONS,
    BRANCH,
    CLOCK,
    EXHAUSTIVE,
    MODULES,
    SALVAGES,
    SESSIONS,
    Booted,
    CallFault,
    DamagedTables,
    Host,
    Interrupted,
    OwnSession,
    ProbeState,
    Refused,
    Returned,
    Rings,
    SessionState,
    Summary,
    TortureJob,
    snapshot_fix,
)
from sdtgen.targets.emulator.machine import GuestFault, Machine
from sdtgen.targets.emulator.machine import Interrupted as MachineInterrupted
from sdtgen.targets.emulator.platform import Platform, runtime_entries, session_pool
from sdtgen.targets.emulator.runtime import ProbeRuntime
from sdtgen.trace.model import Lost


def _same(addr: int) -> int:
    """The emulator's memory: the kernel's addresses are the host's."""
    return addr


def fault_of(e: GuestFault) -> CallFault:
    return CallFault(e.what, e.pc, isinstance(e, MachineInterrupted))


class EmulatorTarget:
    """The host's image booted in the emulator on ``cpus`` CPUs (``modules``: with room for a module)."""

    capabilities = frozenset({MODULES, ACTIONS, EXHAUSTIVE, SALVAGES, SESSIONS, CLOCK})
    damaged = 0  # the rings are read in memory the host maps: nothing on the way is damaged
    flushed_all = True  # the host closes every CPU's open packet itself
    # The session the host opened for itself (--session), whose id its packets carry; None: the default session's.
    own: OwnSession | None = None
    own_id = 0
    # The session the session-scoped verbs (enable, disable, programs, tables, drain, lost) act on: the host's own,
    # or, inside scoped(NAME), session NAME (one the emulated kernel opened); 0: the default session.
    scope = 0

    def __init__(self, host: Host, *, patch: bool, buffer_size: int, overflow: str, cpus: int, seed: int,
                 schedule: str, stream: bool, modules: bool, own: OwnSession | None) -> None:
        # Every option is required: the defaults are the factory's alone (sdtgen.targets.DEFAULTS and OWN).
        from sdtgen.targets.emulator.smp import MAX_CPUS, SCHEDULES

        if not 1 <= cpus <= MAX_CPUS:
            raise SdtError("", f"--cpus {cpus} is not a number of CPUs from 1 to {MAX_CPUS}")
        if schedule not in SCHEDULES:
            raise SdtError("", f"unknown schedule {printable(schedule)!r}", f"use one of {', '.join(SCHEDULES)}")
        if cpus * buffer_size > MAX_RINGS:
            raise SdtError("", f"{cpus} CPUs with --buffer-size {buffer_size} need {cpus * buffer_size >> 20} MiB of "
                           f"rings, more than the {MAX_RINGS >> 20} MiB a boot maps",
                           "give fewer --cpus or a smaller --buffer-size")
        if host.arm == BRANCH and not patch:
            raise SdtError("", "cannot arm with branches: nothing is patched (--no-patch)", "boot without --no-patch")
        self.host = host
        self.image = host.image
        self.cpus, self.seed, self.schedule = cpus, seed, schedule
        self.buffer_size, self.overflow = buffer_size, overflow
        self.stream = stream and overflow == "drop"  # a flight recorder is read when a run ends
        self.patched = patch
        self.machine: Machine | None = None
        self.smp = None
        self._broken: set[int] = set()  # CPUs whose sdt_flush faulted: neither flushed nor read again
        self._lost_shown = 0  # records lost to full rings, said so far
        self._tables = False  # every CPU's aggregation tables attached
        self._next_program = 0  # where the next program goes in the platform's program area
        self.entries = runtime_entries(self.image)
        self.module_base = 0  # the module area's address, when the boot maps one (modules)
        self.module = None  # the LinkedModule loaded, if any
        self.expects_modules = modules
        try:
            self._boot()
            if own is not None:
                self.open_own(own)
        except BaseException:
            self.close()
            raise

    # -- boot -----------------------------------------------------------------------------------
    def _check_host(self) -> None:
        """Threads made small, and the boot refused if its CPUs would not fit the address-space limit."""
        from sdtgen.elf.reader import PT_LOAD
        from sdtgen.targets.emulator.host import check_address_space, prepare_threads
        from sdtgen.targets.emulator.machine import STACK_SIZE, tcg_buffer_for

        prepare_threads()
        guest = sum(s.memsz for s in self.image.elf.segments if s.type == PT_LOAD) + self.cpus * STACK_SIZE
        threads = self.cpus * (2 if self.cpus > 1 and self.schedule == "parallel" else 1)  # watchdogs, CPUs
        check_address_space(self.image.path, self.cpus, tcg_buffer_for(self.image.elf), guest,
                            self.cpus * self.buffer_size + session_pool(self.cpus, self.buffer_size), threads)

    def _boot(self) -> None:
        from sdtgen.targets.emulator.clock import guest_clock
        from sdtgen.targets.emulator.smp import Smp
        from sdtgen.transport.consumer import Consumer, Ring, StoppedMemory

        arch = self.image.arch
        self._check_host()
        self.machine = Machine(self.image.elf, arch, cpus=self.cpus)
        self.clock_name, self.clock_hz = guest_clock(arch)  # the rate the runtime is given (hooks.clock_hz)
        if self.expects_modules:  # mapped before the other CPUs' engines, which share the memory
            from sdtgen.modlink import MODULE_AREA, module_area

            self.module_base = module_area(self.image)
            self.machine.map_area(self.module_base, MODULE_AREA, "the module area")
        self.platform = Platform(self.machine, self.cpus, self.buffer_size, self.overflow, self.clock_hz)
        self.smp = Smp(self.machine, self.cpus, self.seed, self.schedule)
        for m in self.smp.cpus:
            self.platform.own_page(m)
        self.runtime = ProbeRuntime(self.smp.cpus, self.platform, self.entries, self.image.bounds)
        self.smp.sync = self.runtime.flush_all
        self.runtime.sync = self.smp.sync_cores
        self.runtime.on_warning = self.host.warning
        self.runtime.on_action = lambda m, name, value: self.host.action(m.cpu, name, value)
        self.runtime.on_packets = self._consume_now
        self.runtime.on_area = self._consume_area
        self.runtime.on_fired = self._flush_cpu
        self.runtime.on_report = self.host.log
        size = self.platform.packet_size  # the rings are the host's: where they are and their sizes are believed
        rings = [Ring(self.platform.area(k), self.platform.ring(k), self.buffer_size // size, size)
                 for k in range(self.cpus)]
        self.consumer = Consumer(StoppedMemory(self.machine, arch.little), arch.bits, rings, self.host.packet,
                                 self.host.open_streams(self.clock_hz, self.cpus, size))
        policy = 1 if self.overflow == "overwrite" else 0
        try:
            for k in range(self.cpus):
                r = self.runtime.call(self.machine, "sdt_cpu_attach", [self.platform.area(k), k,
                                                                       self.platform.ring(k), self.buffer_size,
                                                                       self.platform.packet_size, policy])
                if r:
                    raise SdtError(self.image.path, f"the runtime refused CPU {k}'s ring ({self.buffer_size} bytes "
                                   f"in packets of {self.platform.packet_size})", "give another --buffer-size")
            if self.patched:
                self.runtime.init()
            else:
                self.runtime.refresh()
        except GuestFault as e:  # the kernel's own boot-time code did not run: the image is not loadable as is
            raise SdtError(self.image.path, f"the runtime faulted while the boot set it up: {e.what} at "
                           f"{self.image.where(e.pc)[0]}", "check that the image's loadable segments hold its code "
                           "(readelf -lW) and relink it") from None
        states = [s.state for s in self.runtime.sites] if self.patched else []
        self.booted = Booted(arch.name, self.cpus, self.clock_name, self.clock_hz, states.count("off"),
                             states.count("refused"), states.count("folded"), self.entries.protocol)
        from sdtgen.targets.emulator.sessions import Sessions

        self.sessions_open = Sessions(self)

    def clock(self) -> int:
        """The guest's clock read now, by the platform's own clock routine (what sdt_hooks.clock runs) on CPU 0."""
        m = self.smp.cpus[0]
        m.call(self.platform.code["clock"], [])
        return m.model.returned(m.uc)

    # -- the consumer -------------------------------------------------------------------------------
    def _consume_now(self, cpu: int) -> None:
        """The notify hook: a packet of ``cpu`` closed (with --overflow drop, read as it closes)."""
        if self.stream and self.own is None:  # with the host's own session, the default one's are the kernel's
            self.consumer.consume(cpu)

    def _consume_area(self, area: int) -> None:
        """The notify hook on a session's area: the host's own session's packets read as they close."""
        found = self.sessions_open.area_of(area)
        if self.stream and found is not None and found[0] == self.own_id and self.own is not None:
            self._own_consumer().consume(found[1])

    def _own_consumer(self):
        return self.sessions_open.consumer(self.own_id, self.host.packet, self._own_streams)

    def _flush_cpu(self, m: Machine) -> None:
        """What CPU ``m`` recorded so far, read now: an --action's result follows its firing."""
        if self.own is not None:
            self.sessions_open.call("sdt_session_flush", [self.sessions_open.opened[self.own_id].struct], m.cpu)
            self._own_consumer().consume(m.cpu)
            return
        self.runtime.flush(m)
        self.consumer.consume(m.cpu)

    def drain(self) -> None:
        """Every CPU's open packet closed and every closed packet read. A fault of sdt_flush (a kernel that broke
        its CPU area or its ring) is the host's to say and count, once: that CPU is not flushed or read again.
        With the host's own session open, its packets are what is read (the default session's are the kernel's)."""
        if self.own is not None:
            return self._drain_own()
        for m in self.smp.cpus:
            if m.cpu in self._broken:
                continue
            try:
                self.runtime.flush(m)
            except MachineInterrupted as e:
                raise Interrupted(fault_of(e)) from None
            except GuestFault as e:
                self._broken.add(m.cpu)
                self.host.fault("sdt_flush", fault_of(e), m.cpu)
        for cpu in range(self.cpus):
            if cpu not in self._broken:
                self.consumer.consume(cpu)
        lost = self.consumer.total_lost
        if lost > self._lost_shown:
            self.host.warning(f"{lost - self._lost_shown} record(s) lost: the trace buffer was full "
                              f"(--buffer-size {self.buffer_size}, --overflow {self.overflow})")
            self._lost_shown = lost

    def _drain_own(self) -> None:
        try:
            self.sessions_open.flush(self.own_id)
        except MachineInterrupted as e:
            raise Interrupted(fault_of(e)) from None
        consumer = self._own_consumer()
        for cpu in range(self.cpus):
            if cpu not in self._broken:
                consumer.consume(cpu)
        lost = consumer.total_lost
        if lost > self._lost_shown:
            self.host.warning(f"{lost - self._lost_shown} record(s) lost: session {self.own.name!r}'s buffer was full "
                              f"(--buffer-size {self.own.ring}, --overflow {self.own.policy})")
            self._lost_shown = lost

    def _drain_after_interrupt(self) -> None:
        """What was recorded before Ctrl-C, read: the runtime's short sdt_flush calls deaf to a Ctrl-C that
        is still on its way (they keep their deadline); a fault there leaves the rest unread."""
        for m in self.smp.cpus:
            m.watchdog.deaf = True
        try:
            self.drain()
        except (GuestFault, Interrupted):
            pass
        finally:
            for m in self.smp.cpus:
                m.watchdog.deaf = False

    def lost(self) -> dict[int, Lost]:
        return self._own_consumer().lost() if self.own is not None else self.consumer.lost()

    # -- arming ----------------------------------------------------------------------------------
    def _need_patched(self, text: str) -> None:
        if not self.patched:
            raise SdtError("", f"cannot arm or disarm {printable(text)!r}: nothing is patched (--no-patch), "
                           "so every site stays a call to its empty stub", "boot without --no-patch")

    def enable(self, spec: str, mode: str) -> int:
        self._need_patched(spec)
        self.runtime.mode = mode
        return self.runtime.enable(ProbeSpec.parse(spec), spec)

    def disable(self, spec: str) -> int:
        self._need_patched(spec)
        return self.runtime.disable(ProbeSpec.parse(spec), spec)

    # -- sessions (docs/sessions.md) ----------------------------------------------------------------------
    def open_session(self, name: str, ring: int, packet: int, policy: str, tables: int = 0) -> int:
        """sdt_session_open as the emulated kernel calls it, in memory of its own: the session's id. Refused (the
        runtime's SDT_ERR_MEMORY, FULL, EXISTS, NAME, ARG) as one line."""
        from sdtgen.layout import VALUES

        fix = {VALUES["SDT_ERR_MEMORY"]: f"give a smaller --buffer-size (the emulated kernel gives its sessions "
                                         f"{self.platform.pool_bytes >> 10} KiB in all)",
               VALUES["SDT_ERR_FULL"]: "close a session first (--sessions lists them)",
               VALUES["SDT_ERR_EXISTS"]: "give --session another name (--sessions lists those open)",
               VALUES["SDT_ERR_NAME"]: "give a name of 1 to 15 letters, digits, '_' or '-'"}
        try:
            return self.sessions_open.open(name, ring, packet, policy, tables)
        except Refused as e:
            raise SdtError(self.image.path, f"the runtime refused to open session {printable(name)!r}: "
                           f"{printable(e.text)}", fix.get(e.code, "see --sessions for the sessions it has")) from None

    def close_session(self, name: str) -> int:
        """sdt_session_close: the sites only it kept disarmed (their count); its memory the emulator's again."""
        s = self.sessions_open.named(name)
        try:
            n = self.sessions_open.close(s.id)
        except Refused as e:
            raise SdtError(self.image.path, f"the runtime refused to close session {printable(name)!r}: "
                           f"{printable(e.text)}") from None
        self.runtime.refresh()
        return n

    def open_own(self, own: OwnSession) -> int:
        """The host's own session beside the kernel's: every session-scoped verb acts on it from now on."""
        self.own_id = self.open_session(own.name, own.ring, own.packet, own.policy, own.tables)
        self.own = own
        self._own_streams = self.host.open_streams(self.clock_hz, self.cpus, own.packet)  # its packets' checks
        self._scope(self.own_id)
        return self.own_id

    def close_own(self) -> None:
        """The host's own session closed (what it alone armed disarmed), its memory the emulator's again."""
        own, self.own = self.own, None
        if own is not None and self.own_id in self.sessions_open.opened:
            self.close_session(own.name)
        self._scope(0)

    def _scope(self, sid: int) -> None:
        self.scope = sid
        self.runtime.scope_struct = self.sessions_open.get(sid).struct if sid else 0

    @contextmanager
    def scoped(self, name: str | None):
        """The session-scoped verbs act on session ``name`` (one the emulated kernel opened; None: the default
        session) meanwhile."""
        before = self.scope
        self._scope(self.sessions_open.named(name).id if name is not None else 0)
        try:
            yield
        finally:
            self._scope(before)

    def take_snapshot(self, name: str) -> dict[str, int]:
        """sdt_snapshot of session ``name`` now, as the emulated kernel's own call would take it: what the session
        then says (the control core's `snapshot` line's fields, and ``kept``)."""
        s = self.sessions_open.named(name)
        try:
            return self.sessions_open.snapshot(s.id)
        except Refused as e:
            raise SdtError(self.image.path, f"the runtime cannot snapshot session {printable(name)!r}: "
                           f"{printable(e.text)}", snapshot_fix(e.code)) from None

    def sessions(self) -> list[SessionState]:
        """Every session the runtime has open, the default one first, as its registry and slots say."""
        return self.sessions_open.states()

    def read_session(self, name: str, take) -> SessionState:
        """Session ``name``'s packets (one the emulated kernel opened): each CPU's open packet closed and every
        closed one read where the runtime wrote it, into ``take``; the session as it was listed before."""
        s = self.sessions_open.named(name)
        state = next(x for x in self.sessions() if x.id == s.id)
        try:
            self.sessions_open.flush(s.id)
        except MachineInterrupted as e:
            raise Interrupted(fault_of(e)) from None
        consumer = self.sessions_open.consumer(s.id, take, None)
        for cpu in range(self.cpus):
            consumer.consume(cpu)
        return state

    def set_mode(self, mode: str) -> int:
        if mode == BRANCH and not self.patched:
            raise SdtError("", "cannot arm with branches: nothing is patched (--no-patch)", "boot without --no-patch")
        if self.patched:
            self.runtime.set_mode(mode)
        self.runtime.mode = mode
        return len(self.runtime.armed())

    def add_action(self, spec: str, func: int, symbol: str) -> None:
        """Call ``func`` in the guest, with the probe's arguments, whenever a probe matching ``spec`` fires: the
        probes matching it, once enabled, are armed with the breakpoint whatever the mode (the host must see them
        fire)."""
        pattern = ProbeSpec.parse(spec)
        if any(s.form == "goto" for s in self.runtime.matching(pattern)):  # their arguments exist only out of line
            self.host.warning(f"--action {spec}: asm goto sites fire from their out-of-line code, where no "
                              "breakpoint stops them; the action follows the call sites' firings only")
        self.runtime.actions.append((pattern, func, symbol))

    def remove_action(self, spec: str, func: int) -> None:
        """The action on ``spec`` calling ``func`` added last taken back (its enabling was refused), and that one
        only: one given twice stays once, as DTrace takes back the one enabling it was asked to, not its twins."""
        pattern = ProbeSpec.parse(spec)
        actions = self.runtime.actions
        for i in reversed(range(len(actions))):
            if (actions[i][0], actions[i][1]) == (pattern, func):
                del actions[i]
                return

    # -- modules ------------------------------------------------------------------------------------
    def load_module(self, path: str):
        """The host as the kernel's loader: the module relocated into the module area, then sdt_module_load."""
        from sdtgen.modlink import link_module
        from sdtgen.targets.base import LoadedModule

        if not self.module_base:
            raise SdtError("", "this boot has no module area", "give --module to sdtgen boot")
        self._need_patched(path)
        linked = link_module(self.image, path, self.module_base)
        if self.module is not None:
            raise SdtError(path, f"module {self.module.name} is loaded in the module area",
                           f"unload it first (module unload {self.module.name})")
        self.machine.write(self.module_base, bytes(linked.size))
        for addr, data, _ in linked.segments:
            self.machine.write(addr, data)
        self.runtime.flush_all(self.machine)  # the module's code fetched anew
        n = self.runtime.load_module(linked.name, linked.bounds, [self.module_struct(), linked.table, *linked.text])
        self.module = linked
        probes = {s.probe.addr: s.probe for s in self.runtime.sites if 0 <= s.addr - linked.base < linked.size}
        return LoadedModule(linked.name, n, dict(linked.functions), tuple(probes.values()))

    def unload_module(self, name: str) -> int:
        if self.module is None or self.module.name != name:
            raise SdtError("", f"no module {printable(name)!r} is loaded", "load it with --module FILE")
        n = self.runtime.unload_module(name, self.module_struct())
        self.module = None
        return n

    def module_struct(self) -> int:
        """The kernel's memory for the runtime's struct sdt_module: the module area's last bytes."""
        from sdtgen.layout import MODULE
        from sdtgen.modlink import MODULE_AREA

        return (self.module_base + MODULE_AREA - MODULE.size(self.image.arch.bits)) & ~63

    def sites(self) -> list:
        """Every entry of the table as sdt_init left it in memory (TableSite: its state and verified size)."""
        return list(self.runtime.sites)

    def probes(self, spec: str = "") -> list[ProbeState]:
        pattern = ProbeSpec.parse(spec) if spec else None
        out = []
        for p in self.runtime.probes():
            if pattern is not None and not pattern.matches(p):
                continue
            mine = [s for s in self.runtime.sites if s.probe.addr == p.addr and s.state != "folded"]
            out.append(ProbeState(p.key, p.spec, len(mine), sum(s.state in ("trap", "branch") for s in mine)))
        return out

    # -- programs and their tables (docs/aggregations.md) --------------------------------------------
    def attach_tables(self) -> None:
        """Each CPU's struct sdt_agg and table memory, in the platform's area, attached by a call on CPU 0."""
        from sdtgen.layout import ERRORS

        if self._tables or self.scope:  # a session's tables were carved when it opened
            return
        m = self.smp.cpus[0]
        for k in range(self.cpus):
            at, size = self.platform.agg_tables(k)
            r = self.runtime.call(m, "sdt_agg_attach", [self.platform.area(k), self.platform.agg(k), at, size])
            if r:
                raise SdtError(self.image.path, f"the runtime refused CPU {k}'s aggregation tables: "
                               f"{ERRORS.get(r, f'error {r}')}")
        self._tables = True

    def load_program(self, code: bytes) -> int:
        """``code`` in the platform's program area, after the programs before it (kept: a program is the kernel's
        until every probe it is attached to is disabled)."""
        area, size = self.platform.program_area()
        if self._next_program + len(code) > size:
            raise SdtError("", f"the programs take more than the {size >> 10} KiB the emulated boot gives them",
                           "aggregate fewer clauses in one boot")
        at = area + self._next_program
        self.machine.write(at, code)
        self._next_program += (len(code) + 7) & ~7
        return at

    def _program_call(self, name: str, args: list[int]) -> int:
        from sdtgen.layout import ERRORS

        try:
            r = self.runtime.call(self.smp.cpus[0], name, args)
        except MachineInterrupted as e:
            raise Interrupted(fault_of(e)) from None
        self.runtime.refresh()
        if r < 0:
            raise Refused(r, ERRORS.get(r, f"error {r}"))
        return r

    def enable_program(self, spec: str, mode: str, program: int, size: int) -> int:
        from sdtgen.targets.emulator.runtime import MODES

        self._need_patched(spec)
        m = self.smp.cpus[0]
        if self.scope:
            return self._program_call("sdt_session_enable_program", [self.runtime.scope_struct,
                                                                     self.runtime._spec(m, spec), MODES[mode],
                                                                     program, size])
        return self._program_call("sdt_enable_program", [self.runtime._spec(m, spec), MODES[mode], program, size])

    def disable_program(self, spec: str) -> int:
        self._need_patched(spec)
        spec_at = self.runtime._spec(self.smp.cpus[0], spec)
        if self.scope:
            return self._program_call("sdt_session_disable_program", [self.runtime.scope_struct, spec_at])
        return self._program_call("sdt_disable_program", [spec_at])

    def take_tables(self) -> list:
        """sdt_agg_switch on CPU 0 (every CPU is stopped between commands: none is adding), then each CPU's frozen
        half read straight out of guest memory, believing nothing past the memory this target attached."""
        from sdtgen.dscript.tables import AggTableError, read_cpu
        from sdtgen.targets.emulator.platform import AGG_TABLE_BYTES

        if self.scope:
            self._program_call("sdt_session_switch", [self.runtime.scope_struct])
            where = self.sessions_open.agg_areas(self.scope)
        elif not self._tables:
            return []
        else:
            self._program_call("sdt_agg_switch", [])
            where = [(self.platform.agg(k), AGG_TABLE_BYTES) for k in range(self.cpus)]
        arch, out = self.image.arch, []
        for k, (agg, size) in enumerate(where):
            try:
                t = read_cpu(self.machine.read, agg, arch.bits, arch.little, None, size)
                out.append(t if t.cpu == k else DamagedTables(k, f"its table says it is CPU {t.cpu}'s"))
            except (AggTableError, GuestFault) as e:
                out.append(DamagedTables(k, str(e)))
        return out

    # -- calls ---------------------------------------------------------------------------------------
    def run(self, func: int, args: list[int | str], cpu: int | None, timeout: float) -> list[Returned]:
        """The call on ``cpu``'s engine, or on every CPU's at once; what each CPU recorded read before the results."""
        words = [a if isinstance(a, int) else self._put_string(k, a) for k, a in enumerate(args)]
        try:
            if cpu is None:
                results = self.smp.call_all(func, words, timeout)
            else:
                results = [self._call_one(self.smp.cpus[cpu], func, words, timeout)]
        except MachineInterrupted as e:
            self._drain_after_interrupt()
            raise Interrupted(fault_of(e)) from None
        faulted = [r for r in results if isinstance(r, GuestFault)]
        if faulted:  # the rings as the fault left them, read before the runtime's own sdt_flush runs again
            self.host.crashed(f"{self.image.symbolize(func).removesuffix('+0x0')}: {faulted[0].what}")
        self.drain()
        cpus = range(self.cpus) if cpu is None else [cpu]
        return [Returned(k, 0, fault_of(r)) if isinstance(r, GuestFault) else Returned(k, r)
                for k, r in zip(cpus, results, strict=True)]

    @staticmethod
    def _call_one(m: Machine, func: int, args: list[int], timeout: float) -> int | GuestFault:
        try:
            return m.call(func, args, timeout=timeout)
        except MachineInterrupted:
            raise
        except GuestFault as fault:
            return fault

    def _put_string(self, k: int, text: str) -> int:
        """A string argument, in the guest's scratch for host calls (after the trap frame and the spec)."""
        data = text.encode("utf-8")
        where = self.platform.string_buffer(k, len(data) + 1)
        self.machine.write(where, data + b"\0")
        return where

    def read(self, addr: int, size: int) -> bytes | None:
        try:
            return self.machine.read(addr, size)
        except GuestFault:
            return None

    def memory(self) -> Rings:
        """The kernel's memory as a running kernel's is read (a session's snapshot): the machine's, as rings()."""
        return self.rings()

    def rings(self) -> Rings:
        """The machine's memory and the platform's CPU areas, for a post-mortem; the runtime's registry of sessions
        (sdt_session_table) where the image has one."""
        table = self.image.symbols.get("sdt_session_table")
        return Rings(self._read_memory, tuple(self.platform.area(k) for k in range(self.cpus)),
                     tuple(self.platform.ring(k) for k in range(self.cpus)), _same,
                     table.value if table is not None else None, _same)

    def _read_memory(self, addr: int, size: int) -> bytes:
        try:
            return self.machine.read(addr, size)
        except GuestFault as e:
            raise ValueError(e.what) from None

    def torture(self, job: TortureJob) -> Summary:
        """The torture on this boot's CPUs, the last of which toggles (a boot for it: seeded, one CPU more than call;
        see sdtgen/targets/emulator/torture.py)."""
        from sdtgen.targets.emulator.torture import Torture

        if self.cpus < 2:
            raise SdtError("", "the emulated torture needs a CPU that calls and one that toggles",
                           "boot with --cpus 2 or more")
        t = Torture(self, job.func, job.args, job.mask, job.toggles, job.timeout, job.spec, job.mode, job.progress,
                    job.keep, job.take)
        t.prepare(job.symbol)
        return t.run()

    def exhaustive(self, symbol: str, module: bool, keep: str = "", take=lambda: None) -> Summary:
        from sdtgen.targets.emulator.exhaustive import exhaustive

        return exhaustive(self, symbol, module=module, keep=keep, take=take)

    def close(self) -> None:
        for m in self.smp.cpus[1:] if self.smp is not None else []:
            m.close()
        if self.machine is not None:
            self.machine.close()
            self.machine = None

