"""One emulated boot: load, patch from the image's own table, then enable, disable and run.

Events go to a Reporter: one human line each, or JSON Lines with --json.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from sdtgen.boot.machine import GuestFault, Machine
from sdtgen.boot.patcher import PatchResult, Refusal, patch_sites
from sdtgen.boot.runtime import Firing, ProbeRuntime, SpecError, read_guest_string
from sdtgen.elf.reader import SHF_WRITE, STT_FUNC, STT_OBJECT
from sdtgen.errors import SdtError
from sdtgen.image import Image
from sdtgen.probes import ProbeSpec
from sdtgen.table import TableError, read_tables

RETURN_TYPES = ("long", "int", "uint", "ulong", "str", "void")


class Reporter:
    def __init__(self, as_json: bool = False, out: TextIO | None = None) -> None:
        self.as_json = as_json
        self.out = out or sys.stdout

    def _emit(self, event: dict, human: str | None) -> None:
        if self.as_json:
            self.out.write(json.dumps(event) + "\n")
        elif human is not None:
            self.out.write(human + "\n")
        self.out.flush()

    def patched(self, result: PatchResult) -> None:
        folded = f", {result.folded} folded into others" if result.folded else ""
        self._emit({"event": "patched", "sites": len(result.sites), "refused": len(result.refused),
                    "folded": result.folded},
                   f"patched {len(result.sites)} sites ({len(result.refused)} refused{folded})")

    def refused(self, r: Refusal, where: str) -> None:
        self._emit({"event": "refused", "probe": r.entry.probe.spec, "pc": r.entry.addr, "where": where,
                    "reason": r.reason, "bytes": r.found.hex()},
                   f"refused {r.entry.probe.spec} at {where}: {r.reason} (found {r.found.hex(' ') or 'nothing'})")

    def fire(self, f: Firing) -> None:
        self._emit({"event": "fire", "probe": f.probe, "pc": f.pc, "args": list(f.args)},
                   f"{f.probe}  {format_args(f)}".rstrip())

    def returned(self, symbol: str, args: list[int], value: int | str | None) -> None:
        shown = "void" if value is None else json.dumps(value) if isinstance(value, str) else str(value)
        self._emit({"event": "return", "symbol": symbol, "value": value},
                   f"{symbol}({', '.join(map(str, args))}) = {shown}")

    def fault(self, symbol: str, fault: GuestFault, where: str, last: str | None) -> None:
        self._emit({"event": "fault", "symbol": symbol, "fault": fault.what, "pc": fault.pc, "where": where,
                    "last_probe": last},
                   f"fault in {symbol}: {fault.what} at {where} (last probe fired: {last or 'none'})")

    def stats(self, hits: dict[str, int]) -> None:
        lines = "\n".join(f"{n:8d}  {p}" for p, n in sorted(hits.items())) or "no probe fired"
        self._emit({"event": "stats", "hits": dict(sorted(hits.items()))}, lines)

    def warning(self, text: str) -> None:
        self._emit({"event": "warning", "text": text}, f"warning: {text}")

    def action(self, symbol: str, value: int) -> None:
        self._emit({"event": "action", "symbol": symbol, "value": value}, f"action {symbol} returned {value}")


def format_args(f: Firing) -> str:
    parts = []
    for i, (value, ctype) in enumerate(zip(f.args, f.types, strict=True)):
        if isinstance(value, str):
            parts.append(f"arg{i}={json.dumps(value)}")
        elif value is None:
            parts.append(f"arg{i}=<unreadable>")
        elif "*" in ctype:
            parts.append(f"arg{i}={value:#x}")
        else:
            parts.append(f"arg{i}={value}")
    return " ".join(parts)


class BootSession:
    def __init__(self, path: str, reporter: Reporter, patch: bool = True) -> None:
        self.reporter = reporter
        self.image = Image(path)
        arch = self.image.arch
        self.machine = Machine(self.image.elf, arch)
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
        self.patch = patch_sites(self.machine, entries) if patch else PatchResult([], [])
        reporter.patched(self.patch)
        for r in self.patch.refused:
            reporter.refused(r, self.image.symbolize(r.entry.addr))
        self.runtime = ProbeRuntime(self.machine, self.patch, reporter.fire)
        self.runtime.on_warning = reporter.warning
        self.runtime.on_action = reporter.action
        self.runtime.flag = self._probes_enabled_flag()
        self.faults = 0

    def close(self) -> None:
        self.image.close()

    def _probes_enabled_flag(self) -> int | None:
        """Where SDT_PROBES_ENABLED()'s flag is: the one-byte sdt_probes_enabled the stubs define (None when
        the image has none, or it is not in writable memory)."""
        sym = self.image.symbols.get("sdt_probes_enabled")
        if sym is None or sym.type != STT_OBJECT or sym.size != 1 or not 0 < sym.shndx < len(self.image.elf.sections):
            return None
        section = self.image.elf.sections[sym.shndx]
        writable = section.is_alloc and section.flags & SHF_WRITE and not section.is_exec
        return sym.value if writable and section.addr <= sym.value < section.addr + section.size else None

    def enable(self, spec: str) -> int:
        return self._arm(spec, self.runtime.enable)

    def disable(self, spec: str) -> int:
        return self._arm(spec, self.runtime.disable)

    def _arm(self, spec: str, action) -> int:
        try:
            n = action(spec)
        except SpecError as e:
            raise SdtError("", f"bad probe spec: {e}") from None
        if n == 0:
            raise SdtError("", f"probe spec {spec!r} matches no patched probe site",
                           "list the probes with `sdtgen probes IMAGE`")
        return n

    def add_action(self, spec: str, symbol: str) -> None:
        """Call SYMBOL in the guest, with the probe's arguments, whenever a probe matching SPEC fires."""
        sym = self.image.symbols.get(symbol)
        if sym is None or sym.type != STT_FUNC:
            raise SdtError(self.image.path, f"no function {symbol!r} in the image", "check the symbol name")
        try:
            pattern = ProbeSpec.parse(spec)
        except ValueError as e:
            raise SdtError("", f"bad probe spec: {e}") from None
        self.runtime.actions.append((pattern, sym.value, symbol))

    def functions(self) -> list[str]:
        return sorted(n for n, s in self.image.symbols.items() if s.type == STT_FUNC)

    def run(self, target: str, args: list[int]) -> int | str | None:
        """Call ``SYMBOL[:TYPE]``; TYPE (int, long, uint, ulong, str, void) says how to read the result."""
        symbol, _, rtype = target.partition(":")
        rtype = rtype or "long"
        if rtype not in RETURN_TYPES:
            raise SdtError("", f"unknown return type {rtype!r} in {target!r}", f"use one of {', '.join(RETURN_TYPES)}")
        sym = self.image.symbols.get(symbol)
        if sym is None or sym.type != STT_FUNC:
            raise SdtError(self.image.path, f"no function {symbol!r} in the image", "check the symbol name")
        if len(args) > self.image.arch.max_args:
            raise SdtError("", f"{symbol}: at most {self.image.arch.max_args} arguments can be passed")
        self.runtime.last_fired = None
        try:
            raw = self.machine.call(sym.value, args)
        except GuestFault as fault:
            self.faults += 1
            self.reporter.fault(symbol, fault, self.image.symbolize(fault.pc), self.runtime.last_fired)
            return None
        value = self._decode_return(raw, rtype)
        self.reporter.returned(symbol, args, value)
        return value

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
        self.reporter.stats(dict(self.runtime.hits))
