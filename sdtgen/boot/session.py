"""One emulated boot: load, patch from the image's own table, then enable, disable and run.

Events go to a Reporter: results one human line each on stdout, problems as
diagnostics in sdtgen's one format on stderr; or, with --json, every event as
one JSON line on stdout and nothing else there.
"""

from __future__ import annotations

import bisect
import json
import sys
from functools import partial
from typing import TextIO

from sdtgen.boot.buffers import POLICIES, Rings, make_format
from sdtgen.boot.limits import DEFAULT_BUFFER, DEFAULT_TIMEOUT, MAX_SPEC
from sdtgen.boot.machine import GuestFault, Interrupted, Machine
from sdtgen.boot.patcher import PatchedSite, PatchResult, Refusal, SiteChanged, patch_sites
from sdtgen.boot.runtime import ARM_MODES, BRANCH, DataPath, Firing, ProbeRuntime, read_guest_string
from sdtgen.elf.reader import SHF_WRITE, STT_FUNC, STT_OBJECT
from sdtgen.errors import WARNING, Diagnostic, SdtError, place, printable
from sdtgen.image import Image
from sdtgen.probes import ProbeSpec
from sdtgen.recorder import RECORDER_PREFIX, probe_key
from sdtgen.table import TableError, TableProbe, read_tables

RETURN_TYPES = ("long", "int", "uint", "ulong", "str", "void")
REFUSED_PER_FUNCTION = 3  # refused sites shown per function on a terminal (all of them with --json)
REFUSED_LINES = 20  # refused-site lines shown in all


class Stopped(KeyboardInterrupt):
    """Ctrl-C stopped a guest call; where it was has been reported."""


class Reporter:
    def __init__(self, as_json: bool = False, out: TextIO | None = None, err: TextIO | None = None,
                 file: str = "") -> None:
        self.as_json = as_json
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.file = file  # the image, for diagnostics
        self.per_cpu = False  # several CPUs: a line starts with its CPU

    def _emit(self, event: dict, human: str | None) -> None:
        if self.as_json:
            self.out.write(json.dumps(event) + "\n")
        elif human is not None:
            self.out.write(human + "\n")
        self.out.flush()

    def _diagnose(self, event: dict, severity: str, message: str, fix: str = "", where: str = "") -> None:
        if self.as_json:
            self._emit(event, None)
        else:
            self.out.flush()
            print(Diagnostic(self.file, severity, message, fix, where), file=self.err, flush=True)

    def patched(self, result: PatchResult) -> None:
        folded = f", {result.folded} folded into others" if result.folded else ""
        self._emit({"event": "patched", "sites": len(result.sites), "refused": len(result.refused),
                    "folded": result.folded},
                   f"patched {len(result.sites)} sites ({len(result.refused)} refused{folded})")

    def refused(self, refusals: list[Refusal], where) -> None:
        """Every refusal in --json; on a terminal a few per function, then how many more."""
        shown: dict[str, int] = {}
        lines = 0
        for r in refusals:
            at, function = where(r.entry.addr)
            event = {"event": "refused", "probe": r.entry.probe.spec, "pc": r.entry.addr, "where": at,
                     "reason": r.reason, "bytes": r.found.hex()}
            if self.as_json:
                self._emit(event, None)
                continue
            shown[function] = shown.get(function, 0) + 1
            if shown[function] <= REFUSED_PER_FUNCTION and lines < REFUSED_LINES:
                lines += 1
                found = f" (found {r.found.hex(' ')})" if r.found else ""
                self._diagnose(event, WARNING, f"refused {printable(r.entry.probe.spec)}: {r.reason}{found}",
                               "left unpatched", printable(at))
        hidden = len(refusals) - lines
        if hidden and not self.as_json:
            print(Diagnostic(self.file, WARNING, f"{hidden} more refused sites not shown",
                             "see all of them with --json"), file=self.err, flush=True)

    def changed(self, site: PatchedSite, e: SiteChanged, at: str) -> None:
        self._diagnose({"event": "changed", "probe": site.probe.spec, "pc": site.addr, "where": at,
                        "bytes": e.found.hex(), "expected": e.expected.hex()}, WARNING,
                       f"{printable(site.probe.spec)}: the site's code changed since sdtgen wrote it: {e}",
                       "sdtgen leaves it as it is and writes there no more", printable(at))

    def fire(self, f: Firing) -> None:
        line = f"{printable(f.probe)}  {format_args(f)}".rstrip()
        if self.per_cpu:
            line = _on_cpu(f.cpu) + line
        self._emit({"event": "fire", "probe": f.probe, "pc": f.pc, "args": list(f.args), "cpu": f.cpu, "ts": f.ts},
                   line)

    def returned(self, symbol: str, args: list[int], value: int | str | None, rtype: str,
                 cpu: int | None = None) -> None:
        if value is None:
            shown = "<unreadable>" if rtype == "str" else "void"
        else:
            shown = printable(json.dumps(value)) if isinstance(value, str) else str(value)
        event = {"event": "return", "symbol": symbol, "value": value}
        if cpu is not None:
            event["cpu"] = cpu
        self._emit(event, f"{_on_cpu(cpu)}{printable(symbol)}({', '.join(map(str, args))}) = {shown}")

    def fault(self, symbol: str, fault: GuestFault, where: str, last: str | None, cpu: int | None = None) -> None:
        kind = "interrupted" if isinstance(fault, Interrupted) else "fault"
        event = {"event": kind, "symbol": symbol, "fault": fault.what, "pc": fault.pc, "where": where,
                 "last_probe": last}
        if cpu is not None:
            event["cpu"] = cpu
        self._diagnose(event, "error", f"{_on_cpu(cpu)}{kind} in {printable(symbol)}: {fault.what} "
                       f"(last probe fired: {printable(last or 'none')})", "", printable(where))

    def stats(self, hits: dict[str, int], lost: int = 0) -> None:
        lines = "\n".join(f"{n:8d}  {printable(p)}" for p, n in sorted(hits.items())) or "no probe fired"
        if lost:
            lines += f"\n{lost:8d}  lost (the trace buffer was full: see --buffer-size, --overflow)"
        self._emit({"event": "stats", "hits": dict(sorted(hits.items())), "lost": lost}, lines)

    def warning(self, text: str) -> None:
        self._diagnose({"event": "warning", "text": text}, WARNING, printable(text))

    def action(self, symbol: str, value: int) -> None:
        self._emit({"event": "action", "symbol": symbol, "value": value},
                   f"action {printable(symbol)} returned {value}")

    def probe(self, pid: int, spec: str, sites: int, armed: bool) -> None:
        self._emit({"event": "probe", "id": pid, "probe": spec, "sites": sites, "armed": armed},
                   f"{pid:4d}  {printable(spec):40s} {sites:3d} site(s)  {'armed' if armed else '-'}")

    def armed(self, verb: str, spec: str, sites: int) -> None:
        self._emit({"event": verb, "spec": spec, "sites": sites}, f"{verb} {sites} site(s)")

    def text(self, kind: str, text: str) -> None:
        self._emit({"event": kind, "text": text}, text)


def _on_cpu(cpu: int | None) -> str:
    """How a line starts with its CPU, on a machine of several: ``cpu2 `` (nothing on one CPU)."""
    return "" if cpu is None else f"cpu{cpu} "


def format_args(f: Firing) -> str:
    parts = []
    for i, (value, ctype) in enumerate(zip(f.args, f.types, strict=True)):
        if isinstance(value, str):
            parts.append(f"arg{i}={printable(json.dumps(value))}")
        elif value is None:
            parts.append(f"arg{i}=<unreadable>")
        elif "*" in ctype:
            parts.append(f"arg{i}={value:#x}")
        else:
            parts.append(f"arg{i}={value}")
    return " ".join(parts)


def parse_int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise SdtError("", f"{printable(text)!r} is not an integer",
                       "give decimal, 0x hex or negative numbers") from None


class BootSession:
    def __init__(self, path: str, reporter: Reporter, patch: bool = True, timeout: float = DEFAULT_TIMEOUT,
                 arm: str = "trap", buffer_size: int = DEFAULT_BUFFER, overflow: str = "overwrite",
                 keep: bool = False, cpus: int = 1, seed: int = 0) -> None:
        self.reporter = reporter
        reporter.file = reporter.file or path
        self.timeout = timeout
        self.seed = seed
        self.smp = None  # sdtgen.boot.smp.Smp when cpus > 1
        self.image = Image(path)
        self.machine: Machine | None = None
        if overflow not in POLICIES:
            raise SdtError("", f"unknown overflow policy {printable(overflow)!r}", "use drop or overwrite")
        self.buffer_size, self.overflow, self.cpus = buffer_size, overflow, cpus
        self.recorded: list | None = [] if keep else None  # every drained event, for a trace file
        try:
            self._boot(patch)
            self.set_arm(arm)
        except BaseException:
            self.close()
            raise

    def _boot(self, patch: bool) -> None:
        arch = self.image.arch
        # The allocated sections by address, to name the section of a place.
        self._sections = sorted((s for s in self.image.elf.sections if s.is_alloc and s.size), key=lambda s: s.addr)
        self._section_starts = [s.addr for s in self._sections]
        self.machine = Machine(self.image.elf, arch, cpus=self.cpus)
        bounds = self.image.bounds  # the linker's __start_/__stop_ symbols, as a kernel sees them
        for lo, hi in (bounds.sites, bounds.probes):
            # The sets must be bytes of the image file: a damaged symbol must not make the boot read
            # megabytes of zero-filled memory.
            if not 0 <= hi - lo <= len(self.image.elf.data):
                raise self.image.elf.fail(f"probe table bounds {lo:#x}..{hi:#x} are not a table in this image",
                                          "regenerate the table with `sdtgen gen` and relink")
            if hi > lo:
                self.image.read(lo, hi - lo)
        try:
            entries = read_tables(self.machine.read, bounds, arch.bits, arch.little)
        except (TableError, GuestFault) as e:
            raise self.image.elf.fail(f"corrupt probe table in memory: {e}",
                                      "regenerate it with `sdtgen gen` and relink") from None
        # Without patching, every site stays a call to its empty stub (for comparison).
        self.patched = patch
        self.patch = patch_sites(self.machine, entries) if patch else PatchResult([], [])
        self.reporter.patched(self.patch)
        self.reporter.refused(self.patch.refused, self._where_function)
        data = self._data_path(entries) if patch else None
        self.runtime = ProbeRuntime(self.machine, self.patch, self.reporter.fire, data)
        self.runtime.on_warning = self.reporter.warning
        self.runtime.on_action = self.reporter.action
        self.runtime.on_drain = self.drain
        self.runtime.on_changed = lambda site, e: self.reporter.changed(site, e, self.where(site.addr))
        self.runtime.flag = self._probes_enabled_flag()
        self.faults = 0
        if self.cpus > 1:  # after the boot's patching, which runs before any other CPU exists
            from sdtgen.boot.smp import Smp

            self.smp = Smp(self.machine, self.cpus, self.seed)
            self.runtime.per_cpu = self.reporter.per_cpu = True
            for m in self.smp.cpus:
                m.trap = partial(self.runtime.trap_on, m)
                if data is not None:  # each CPU's per-CPU register points at its own ring's control structure
                    arch.set_cpu_pointer(m.uc, data.rings.control(m.cpu))

    def _data_path(self, entries) -> DataPath | None:
        """The image's recorders (``__sdt_rec_<stub>``) and the rings they write; None without recorders."""
        probes: dict[int, TableProbe] = {e.probe.stub: e.probe for e in entries}
        recorders: dict[int, int] = {}
        formats = {}
        arch = self.image.arch
        for name, sym in self.image.symbols.items():
            if not name.startswith(RECORDER_PREFIX) or sym.type != STT_FUNC:
                continue
            stub = self.image.symbols.get(name[len(RECORDER_PREFIX):])
            probe = probes.get(stub.value) if stub is not None else None
            if probe is None:
                continue
            if self.machine.code_at(sym.value) is None:
                raise self.image.elf.fail(f"recorder {printable(name)} at {sym.value:#x} is outside the image's code",
                                          "regenerate the stubs with `sdtgen gen` and relink")
            key = probe_key(stub.name)
            if key in formats and formats[key].spec != probe.spec:
                raise self.image.elf.fail(f"probes {printable(formats[key].spec)} and {printable(probe.spec)} have "
                                          "the same record key", "rename one of them")
            recorders[probe.stub] = sym.value
            formats[key] = make_format(key, probe.spec, probe.args, arch.bits)
        if not recorders:
            return None
        return DataPath(Rings(self.machine, self.buffer_size, self.overflow, self.cpus), recorders, formats)

    def set_arm(self, mode: str) -> None:
        """``trap`` or ``branch``: how sites are armed from now on (the armed ones are rearmed)."""
        if mode not in ARM_MODES:
            raise SdtError("", f"unknown arming mode {printable(mode)!r}", "use trap or branch")
        if mode == BRANCH and not self.patched:
            raise SdtError("", "cannot arm with branches: nothing is patched (--no-patch)", "boot without --no-patch")
        self.runtime.set_mode(mode)

    def drain(self, cpu: int | None = None) -> None:
        """Report what the guest recorded since the last drain (every CPU, or only ``cpu``, is stopped
        outside its recorder whenever this runs)."""
        before = self.runtime.lost
        events = self.runtime.drain(cpu)
        if self.recorded is not None:
            self.recorded += events
        for e in events:
            self.reporter.fire(self.runtime.firing(e))
        if self.runtime.lost > before:
            self.reporter.warning(f"{self.runtime.lost - before} record(s) lost: the trace buffer was full "
                                  f"(--buffer-size {self.buffer_size}, --overflow {self.overflow})")

    def write_trace(self, path: str, fmt: str) -> None:
        """Write every event the session drained (kept since it started) as a trace file of ``fmt``."""
        from sdtgen.boot.clock import guest_clock
        from sdtgen.trace import TraceEvent, TraceMeta, TraceProbe, write_trace

        self.drain()
        probes = [TraceProbe(i, p.provider, p.module, p.function, p.name, p.args)
                  for i, p in enumerate(self.runtime.probes)]
        ids = {p.spec: p.id for p in probes}
        arch = self.image.arch
        clock, hz = guest_clock(arch)
        data = self.runtime.data
        cpus = data.rings.cpus if data is not None else 1
        lost = {cpu: n for cpu, n in enumerate(data.rings.lost) if n} if data is not None else {}
        events = [TraceEvent(ids[e.probe], e.cpu, e.ts, e.args) for e in self.recorded or []]
        write_trace(path, fmt, TraceMeta(arch.name, clock, hz, cpus, tuple(probes), lost), events)

    def close(self) -> None:
        for m in self.smp.cpus[1:] if self.smp is not None else []:
            m.close()
        if self.machine is not None:
            self.machine.close()
        self.image.close()

    # -- places ---------------------------------------------------------------------
    def where(self, addr: int) -> str:
        """``section:function+0xoff`` of an address, in the one diagnostic shape."""
        return self._where_function(addr)[0]

    def _where_function(self, addr: int) -> tuple[str, str]:
        i = bisect.bisect_right(self._section_starts, addr) - 1
        section = self._sections[i] if i >= 0 and addr < self._sections[i].addr + self._sections[i].size else None
        symbolized = self.image.symbolize(addr)
        function, plus, off = symbolized.rpartition("+")
        if plus:
            name = section.name if section else ""
            return (place(name, function, int(off, 16)) if name else symbolized), function
        if section is not None:
            return place(section.name, None, addr - section.addr), section.name
        return f"{addr:#x}", ""

    # -- probes ---------------------------------------------------------------------
    def _probes_enabled_flag(self) -> int | None:
        """Where SDT_PROBES_ENABLED()'s flag is: the one-byte sdt_probes_enabled the stubs define (None when
        the image has none, or it is not in writable data)."""
        sym = self.image.symbols.get("sdt_probes_enabled")
        if sym is None or sym.type != STT_OBJECT or sym.size != 1 or not 0 < sym.shndx < len(self.image.elf.sections):
            return None
        section = self.image.elf.sections[sym.shndx]
        writable = section.is_alloc and section.flags & SHF_WRITE and not section.is_exec
        return sym.value if writable and section.addr <= sym.value < section.addr + section.size else None

    def spec(self, text: str) -> ProbeSpec:
        if len(text) > MAX_SPEC:
            raise SdtError("", f"a probe spec of {len(text)} characters is longer than the {MAX_SPEC} allowed",
                           "give a shorter spec (globs match many probes)")
        try:
            return ProbeSpec.parse(text)
        except ValueError as e:
            raise SdtError("", printable(str(e))) from None

    def matching(self, text: str) -> list[PatchedSite]:
        return self.runtime.matching(self.spec(text))

    def enable(self, spec: str) -> int:
        return self._arm(spec, self.runtime.enable)

    def disable(self, spec: str) -> int:
        return self._arm(spec, self.runtime.disable)

    def _arm(self, text: str, action) -> int:
        pattern = self.spec(text)
        if not self.patched:
            raise SdtError("", f"cannot arm or disarm {printable(text)!r}: nothing is patched (--no-patch), "
                           "so every site stays a call to its empty stub", "boot without --no-patch")
        if not self.runtime.matching(pattern):
            raise SdtError("", f"probe spec {printable(text)!r} reads as {describe(pattern)} and matches no "
                           "patched probe site", "list the probes with `sdtgen probes IMAGE`; "
                           "a spec is provider:module:function:name, filled from the right")
        n = action(pattern)
        if n == 0 and action == self.runtime.enable:
            raise SdtError(self.image.path, f"no site of {printable(text)!r} could be armed: "
                           "the guest rewrote every one")
        return n

    def add_action(self, spec: str, symbol: str) -> None:
        """Call SYMBOL in the guest, with the probe's arguments, whenever a probe matching SPEC fires.

        The probes matching SPEC are enabled too: an action on a probe that never fires would do nothing.
        """
        sym = self.image.symbols.get(symbol)
        if sym is None or sym.type != STT_FUNC:
            raise SdtError(self.image.path, f"no function {printable(symbol)!r} in the image",
                           "check the symbol name")
        pattern = self.spec(spec)
        self.runtime.actions.append((pattern, sym.value, symbol))  # first: a probe with an action is trapped
        if self.patched and self.runtime.matching(pattern):
            self.runtime.disable(pattern)  # branch-armed sites of it are rearmed with the breakpoint
        try:
            self.enable(spec)
        except BaseException:
            self.runtime.actions.pop()
            raise

    def functions(self) -> list[str]:
        return sorted(n for n, s in self.image.symbols.items() if s.type == STT_FUNC)

    # -- calls ----------------------------------------------------------------------
    def check_run(self, target: str, args: list[int]) -> tuple[int, str]:
        """The function's address and the return type, once ``run(target, args)`` is known to be valid."""
        symbol, _, rtype = target.partition(":")
        rtype = rtype or "long"
        if rtype not in RETURN_TYPES:
            raise SdtError("", f"unknown return type {printable(rtype)!r} in {printable(target)!r}",
                           f"use one of {', '.join(RETURN_TYPES)}")
        sym = self.image.symbols.get(symbol)
        if sym is None or sym.type != STT_FUNC:
            raise SdtError(self.image.path, f"no function {printable(symbol)!r} in the image",
                           "check the symbol name")
        if len(args) > self.image.arch.max_args:
            raise SdtError("", f"{printable(symbol)}: at most {self.image.arch.max_args} arguments can be passed")
        bits = self.image.arch.bits
        for a in args:
            if not -(1 << (bits - 1)) <= a < 1 << bits:
                raise SdtError("", f"argument {a} of {printable(symbol)} does not fit in a {bits}-bit register",
                               f"give a value from {-(1 << (bits - 1))} to {(1 << bits) - 1}")
        return sym.value, rtype

    def run(self, target: str, args: list[int]) -> int | str | None:
        """Call ``SYMBOL[:TYPE]``; TYPE (int, long, uint, ulong, str, void) says how to read the result.

        Ctrl-C stops the guest: where it was is reported, then Stopped is raised.
        """
        func, rtype = self.check_run(target, args)
        symbol = target.partition(":")[0]
        self.runtime.last_fired = None
        if self.smp is not None:
            return self._run_all(symbol, func, args, rtype)
        try:
            raw = self.machine.call(func, args, timeout=self.timeout)
        except GuestFault as fault:
            self.drain()
            self.reporter.fault(symbol, fault, self.where(fault.pc), self.runtime.last_fired)
            if isinstance(fault, Interrupted):  # the user's choice, not the guest's fault
                raise Stopped() from None
            self.faults += 1
            return None
        self.drain()
        value = self._decode_return(raw, rtype)
        self.reporter.returned(symbol, args, value, rtype)
        return value

    def _run_all(self, symbol: str, func: int, args: list[int], rtype: str) -> int | str | None:
        """The call on every CPU at once: one return (or fault) per CPU, in CPU order; CPU 0's value."""
        try:
            results = self.smp.call_all(func, args, self.timeout)
        except Interrupted as fault:
            self.drain()
            self.reporter.fault(symbol, fault, self.where(fault.pc), self.runtime.last_fired)
            raise Stopped() from None
        self.drain()  # every CPU's records, merged in timestamp order
        first = None
        for cpu, raw in enumerate(results):
            if isinstance(raw, GuestFault):
                self.reporter.fault(symbol, raw, self.where(raw.pc), self.runtime.last_fired, cpu=cpu)
                self.faults += 1
                continue
            value = self._decode_return(raw, rtype)
            first = value if cpu == 0 else first
            self.reporter.returned(symbol, args, value, rtype, cpu=cpu)
        return first

    def _decode_return(self, raw: int, rtype: str) -> int | str | None:
        bits = self.image.arch.bits
        if rtype == "void":
            return None
        if rtype == "str":
            return read_guest_string(self.machine, raw)
        width = 32 if rtype in ("int", "uint") else bits
        value = raw & ((1 << width) - 1)
        if rtype in ("int", "long") and value >> (width - 1):
            value -= 1 << width
        return value

    def stats(self) -> None:
        self.drain()
        self.reporter.stats(dict(self.runtime.hits), self.runtime.lost)


def describe(pattern: ProbeSpec) -> str:
    """What each field of a spec means: ``'my:net'`` is function ``my``, name ``net``."""
    named = [f"{field} {printable(value)!r}" for field, value in
             zip(("provider", "module", "function", "name"), pattern.fields, strict=True) if value]
    return ", ".join(named) if named else "every probe"
