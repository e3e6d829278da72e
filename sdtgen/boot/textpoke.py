"""Writing code that other CPUs may be running: the patch protocols, one store at a time.

The model. Guest memory is one host buffer every CPU's engine maps; a CPU
fetches instructions from its own translation cache, refilled from memory
only for code it has no translation of (see docs/boot.md: a CPU does not see
a write to code it has translated until its cache is flushed). A *store* here
writes memory and then flushes every CPU's translations of those bytes, so
the store is what every CPU fetches from then on. A store is atomic only as
the architecture makes it: on x86 no instruction write longer than a byte is
seen whole by another CPU's fetch (the cross-modifying-code erratum), so a
multi-byte write is one store per byte; on AArch64 and RISC-V an aligned
32-bit store is (``Arch.patch_unit``). Between two stores the other CPUs may
run (``steps`` yields there), so every state a write passes through is a
state some CPU may execute.

- ``safe`` (Linux's text_poke_bp): if the new bytes differ from the old in one
  aligned patch unit, one store. Otherwise a breakpoint over the first unit,
  the other bytes (unreachable behind the breakpoint), then the first unit:
  every state is the old instruction, the breakpoint, or the new instruction.
  A CPU that traps on the transient breakpoint looks the site up in
  ``in_flight`` and carries on as if the new instruction were there.
- ``naive``: the differing bytes one store each, in place; the states between
  are neither instruction (``sdtgen torture`` shows what CPUs make of them).
"""

from __future__ import annotations

from collections.abc import Iterator

from sdtgen.boot.machine import Machine

SAFE, NAIVE = "safe", "naive"
PROTOCOLS = (SAFE, NAIVE)


class TextPoke:
    """The one way code is written once several CPUs exist: ``write`` all at once, or ``steps`` interleaved."""

    def __init__(self, cpus: list[Machine], protocol: str = SAFE) -> None:
        self.cpus = cpus
        self.protocol = protocol
        self.in_flight: dict[int, bytes] = {}  # site -> the new bytes, while a breakpoint guards it
        self.stores = 0

    def store(self, addr: int, data: bytes) -> None:
        """Write memory, then flush every CPU's translations of it: from now on every CPU fetches ``data``."""
        self.cpus[0].write(addr, data)
        for m in self.cpus:
            m.invalidate(addr, addr + len(data))
        self.stores += 1

    def write(self, addr: int, new: bytes) -> None:
        """The whole protocol at once (no CPU runs between its stores): the boot's code writes."""
        for _ in self.steps(addr, new):
            pass

    def steps(self, addr: int, new: bytes) -> Iterator[None]:
        """Write ``new`` at ``addr`` by the protocol, yielding after each store (where other CPUs may run)."""
        old = self.cpus[0].read(addr, len(new))
        differ = [i for i in range(len(new)) if old[i] != new[i]]
        if not differ:
            return
        if self.protocol == NAIVE:
            for i in differ:
                self.store(addr + i, new[i:i + 1])
                yield
            return
        unit = self.cpus[0].arch.patch_unit
        if unit:
            first = (addr + differ[0]) & ~(unit - 1)
            if addr + differ[-1] < first + unit and first >= addr and first + unit <= addr + len(new):
                off = first - addr
                self.store(first, new[off:off + unit])
                yield
                return
        yield from self._breakpoint_steps(addr, old, new)

    def _breakpoint_steps(self, addr: int, old: bytes, new: bytes) -> Iterator[None]:
        bp = self.cpus[0].arch.breakpoint(2)  # the shortest: int3 (x86), c.ebreak (RISC-V)
        k = len(bp)
        if len(new) < k:
            raise ValueError(f"a {len(new)}-byte write at {addr:#x} is shorter than the breakpoint")
        self.in_flight[addr] = new
        try:
            if old[:k] != bp:
                self.store(addr, bp)
                yield
            for i in range(k, len(new)):  # behind the breakpoint no CPU fetches these bytes
                if old[i] != new[i]:
                    self.store(addr + i, new[i:i + 1])
                    yield
            if new[:k] != bp:
                self.store(addr, new[:k])
                yield
        finally:
            del self.in_flight[addr]
