"""Several CPUs on one guest memory, interleaved by a seed.

Each CPU is a Machine of its own (an engine with its own registers, stack and
translation cache) mapping the host buffers of the first (``Machine.sibling``).
They run on one host thread, in rounds: every CPU still in its call runs a
quantum of 1 to QUANTUM instructions, the quantum drawn from a generator seeded
by ``--seed``, in CPU order. Unicorn counts instructions exactly, so the same
seed gives the same interleaving, the same firings and the same results: a
failing interleaving can be replayed.
"""

from __future__ import annotations

import random
import time

from sdtgen.boot.machine import GuestFault, Interrupted, Machine
from sdtgen.boot.textpoke import SAFE, TextPoke

QUANTUM = 32  # the most instructions a CPU runs before the next CPU's turn
MAX_CPUS = 64


class Smp:
    def __init__(self, machine: Machine, cpus: int, seed: int = 0, protocol: str = SAFE) -> None:
        self.cpus = [machine] + [machine.sibling(k) for k in range(1, cpus)]
        self.rng = random.Random(seed)
        self.poke = TextPoke(self.cpus, protocol)
        machine.code_writer = self.poke.write  # every code write from now on goes through the protocol

    def quantum(self) -> int:
        return self.rng.randint(1, QUANTUM)

    def call_all(self, func: int, args: list[int], timeout: float) -> list[int | GuestFault]:
        """Call ``func(*args)`` on every CPU at once; per CPU, the return register or the fault."""
        results: list[int | GuestFault | None] = [None] * len(self.cpus)
        running = list(range(len(self.cpus)))
        for k in running:
            self.cpus[k].begin_call(func, args)
        deadline = time.monotonic() + timeout
        try:
            while running:
                for k in list(running):
                    m = self.cpus[k]
                    try:
                        done = m.step(self.quantum())
                    except Interrupted:  # Ctrl-C during an --action's call on this CPU: the whole run stops
                        raise
                    except GuestFault as fault:
                        results[k] = fault
                        running.remove(k)
                        continue
                    if done:
                        results[k] = m.uc.reg_read(m.arch.regs.ret)
                        running.remove(k)
                if running and time.monotonic() > deadline:
                    for k in running:
                        m = self.cpus[k]
                        results[k] = GuestFault(f"did not return within {timeout:g} s", m.uc.reg_read(m.arch.regs.pc))
                    running = []
        except KeyboardInterrupt:
            m = self.cpus[running[0]] if running else self.cpus[0]
            raise Interrupted("interrupted (Ctrl-C)", m.uc.reg_read(m.arch.regs.pc)) from None
        return results  # type: ignore[return-value]
