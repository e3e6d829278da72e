"""One emulated boot: load, patch from the image's own table, then enable, disable and run.

Events go to a Reporter: one human line each, or JSON Lines with --json.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from sdtgen.boot.machine import GuestFault, Machine
from sdtgen.boot.patcher import PatchResult, Refusal, patch_sites
from sdtgen.boot.runtime import Firing, ProbeRuntime, SpecError
from sdtgen.elf.reader import STT_FUNC
from sdtgen.errors import SdtError
from sdtgen.image import Image
from sdtgen.table import TableError, read_tables


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
        self._emit({"event": "patched", "sites": len(result.sites), "refused": len(result.refused)},
                   f"patched {len(result.sites)} sites ({len(result.refused)} refused)")

    def refused(self, r: Refusal, where: str) -> None:
        self._emit({"event": "refused", "probe": r.entry.probe.spec, "pc": r.entry.addr, "where": where,
                    "reason": r.reason, "bytes": r.found.hex()},
                   f"refused {r.entry.probe.spec} at {where}: {r.reason} (found {r.found.hex(' ') or 'nothing'})")

    def fire(self, f: Firing) -> None:
        self._emit({"event": "fire", "probe": f.probe, "pc": f.pc, "args": list(f.args)},
                   f"{f.probe}  {format_args(f)}".rstrip())

    def returned(self, symbol: str, args: list[int], value: int) -> None:
        self._emit({"event": "return", "symbol": symbol, "value": value},
                   f"{symbol}({', '.join(map(str, args))}) = {value}")

    def fault(self, symbol: str, fault: GuestFault, where: str, last: str | None) -> None:
        self._emit({"event": "fault", "symbol": symbol, "fault": fault.what, "pc": fault.pc, "where": where,
                    "last_probe": last},
                   f"fault in {symbol}: {fault.what} at {where} (last probe fired: {last or 'none'})")

    def stats(self, hits: dict[str, int]) -> None:
        lines = "\n".join(f"{n:8d}  {p}" for p, n in sorted(hits.items())) or "no probe fired"
        self._emit({"event": "stats", "hits": dict(sorted(hits.items()))}, lines)

    def note(self, text: str) -> None:
        self._emit({"event": "note", "text": text}, text)


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
    def __init__(self, path: str, reporter: Reporter) -> None:
        self.reporter = reporter
        self.image = Image(path)
        arch = self.image.arch
        self.machine = Machine(self.image.elf, arch)
        bounds = self.image.bounds  # the linker's __start_/__stop_ symbols, as a kernel sees them
        try:
            entries = read_tables(self.machine.read, bounds, arch.bits, arch.little)
        except (TableError, GuestFault) as e:
            raise self.image.elf.fail(f"corrupt probe table in memory: {e}",
                                      "regenerate it with `sdtgen gen` and relink") from None
        self.patch = patch_sites(self.machine, entries)
        reporter.patched(self.patch)
        for r in self.patch.refused:
            reporter.refused(r, self.image.symbolize(r.entry.addr))
        self.runtime = ProbeRuntime(self.machine, self.patch, reporter.fire)
        self.faults = 0

    def close(self) -> None:
        self.image.close()

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

    def functions(self) -> list[str]:
        return sorted(n for n, s in self.image.symbols.items() if s.type == STT_FUNC)

    def run(self, symbol: str, args: list[int]) -> int | None:
        sym = self.image.symbols.get(symbol)
        if sym is None or sym.type != STT_FUNC:
            raise SdtError(self.image.path, f"no function {symbol!r} in the image", "check the symbol name")
        if len(args) > len(self.image.arch.regs.args):
            raise SdtError("", f"{symbol}: at most {len(self.image.arch.regs.args)} arguments can be passed")
        self.runtime.last_fired = None
        try:
            raw = self.machine.call(sym.value, args)
        except GuestFault as fault:
            self.faults += 1
            self.reporter.fault(symbol, fault, self.image.symbolize(fault.pc), self.runtime.last_fired)
            return None
        bits = self.image.arch.bits
        value = raw - (1 << bits) if raw >> (bits - 1) else raw  # the register, as a signed integer
        self.reporter.returned(symbol, args, value)
        return value

    def stats(self) -> None:
        self.reporter.stats(dict(self.runtime.hits))
