"""Several CPUs on one guest memory: each its own Unicorn engine, run in parallel or interleaved by a seed.

Each CPU is a Machine of its own (an engine with its own registers, stack and translation cache)
mapping the host buffers of the first (``Machine.sibling``). Two schedules:

- ``parallel`` (tracing's default): each CPU runs its call on a host thread of its own. Unicorn
  releases the GIL while it emulates, so the CPUs run at once on the host's cores. The runtime's
  sync_cores hook stops the world: every other CPU is stopped at an instruction boundary, every
  CPU's translations are dropped, and they go on, as an IPI with a serializing instruction does.
- ``seeded``: one host thread runs the CPUs in rounds: every CPU still in its call runs a quantum of
  1 to QUANTUM instructions, drawn from a generator seeded by ``--seed``, in CPU order. Unicorn
  counts instructions exactly, so the same seed gives the same interleaving, firings and results:
  a failing interleaving replays (`sdtgen torture` uses it).
"""

from __future__ import annotations

import random
import signal
import threading
import time

from sdtgen.layout import VALUES
from sdtgen.targets.emulator.machine import GuestFault, Interrupted, Machine

QUANTUM = 32  # the most instructions a CPU runs before the next CPU's turn (seeded)
# Each CPU is an engine of its own, some 3.5 MB resident (64 CPUs of the fixture kernel: 225 MB): past ENGINES the
# host's memory, not the kernel, is the limit. Never past the protocol's one bound, which a recording's CPU numbers
# and every host hold to (SDT_MAX_CPUS).
ENGINES = 64
MAX_CPUS = min(ENGINES, VALUES["SDT_MAX_CPUS"])
SCHEDULES = ("parallel", "seeded")
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Smp:
    def __init__(self, machine: Machine, cpus: int, seed: int, schedule: str) -> None:
        self.cpus = [machine] + [machine.sibling(k) for k in range(1, cpus)]
        self.rng = random.Random(seed)
        self.schedule = schedule
        self.sync = lambda m: None  # what sync_cores does once the world is stopped (the session sets it)
        self._lock = threading.Lock()  # one stop-the-world at a time
        self._request = threading.Event()  # a CPU asks the others to stop
        self._release = threading.Event()
        self._parked: set[int] = set()
        self._running: set[int] = set()
        self._state = threading.Condition()
        for m in self.cpus:
            m.park = self._park

    def quantum(self) -> int:
        return self.rng.randint(1, QUANTUM)

    def call_all(self, func: int, args: list[int], timeout: float) -> list[int | GuestFault]:
        """Call ``func(*args)`` on every CPU at once; per CPU, the return register or the fault."""
        if self.schedule == "seeded" or len(self.cpus) == 1:
            return self._seeded(func, args, timeout)
        return self._parallel(func, args, timeout)

    # -- seeded --------------------------------------------------------------------------------
    def _seeded(self, func: int, args: list[int], timeout: float) -> list[int | GuestFault]:
        if len(self.cpus) == 1:
            try:
                return [self.cpus[0].call(func, args, timeout=timeout)]
            except Interrupted:
                raise
            except GuestFault as fault:
                return [fault]
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
                        results[k] = m.uc.reg_read(m.model.regs.ret)
                        running.remove(k)
                if running and time.monotonic() > deadline:
                    for k in running:
                        m = self.cpus[k]
                        results[k] = GuestFault(f"did not return within {timeout:g} s", m.uc.reg_read(m.model.regs.pc))
                    running = []
        except KeyboardInterrupt:
            m = self.cpus[running[0]] if running else self.cpus[0]
            raise Interrupted("interrupted (Ctrl-C)", m.uc.reg_read(m.model.regs.pc)) from None
        return results  # type: ignore[return-value]

    # -- parallel ------------------------------------------------------------------------------
    def _parallel(self, func: int, args: list[int], timeout: float) -> list[int | GuestFault]:
        results: list[int | BaseException | None] = [None] * len(self.cpus)
        with self._state:
            self._running = set(range(len(self.cpus)))

        def run(k: int) -> None:
            if k:  # signals are the main thread's: it stops every CPU
                signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
            try:
                results[k] = self.cpus[k].call(func, args, timeout=timeout)
            except BaseException as e:  # GuestFault, Interrupted, or a host error the main thread re-raises
                results[k] = e
            finally:
                with self._state:
                    self._running.discard(k)
                    self._state.notify_all()

        threads = [threading.Thread(target=run, args=(k,), name=f"sdtgen-cpu{k}", daemon=True)
                   for k in range(1, len(self.cpus))]
        for t in threads:
            t.start()
        try:
            run(0)
            if (isinstance(results[0], BaseException) and not isinstance(results[0], GuestFault)) \
                    or isinstance(results[0], Interrupted):
                self.stop()  # Ctrl-C, SIGTERM or a host error on CPU 0: the others stop too
            for t in threads:
                while t.is_alive():
                    t.join(0.1)
        except BaseException:
            self.stop()
            for t in threads:
                t.join()
            raise
        for r in results:
            if isinstance(r, Interrupted):
                raise r
            if isinstance(r, BaseException) and not isinstance(r, GuestFault):
                raise r
        return results  # type: ignore[return-value]

    def stop(self) -> None:
        """Every CPU's call stops, as Ctrl-C stops it (each reports where it was)."""
        for m in self.cpus:
            m.interrupt()

    def sync_cores(self, me: Machine) -> None:
        """The runtime's sync_cores hook on CPU ``me``: stop the world, drop every CPU's translations, go on."""
        if self.schedule == "seeded" or len(self.cpus) == 1:
            self.sync(me)  # one host thread: every other CPU is between two quanta already
            return
        while not self._lock.acquire(timeout=0.001):
            self._park(me)  # another CPU is stopping the world: be stopped
        try:
            self._release.clear()
            self._request.set()
            others = [m for m in self.cpus if m is not me]
            while True:
                with self._state:
                    waiting = [m for m in others if m.cpu in self._running and m.cpu not in self._parked]
                if not waiting:
                    break
                for m in waiting:
                    m.uc.emu_stop()  # again, in case it came between two emu_start()s
                time.sleep(0.0002)
            self.sync(me)
        finally:
            self._request.clear()
            self._release.set()
            self._lock.release()

    def _park(self, m: Machine) -> bool:
        """Called by a CPU that stopped for no reason of its own: wait while the world is stopped."""
        if not self._request.is_set():
            return False
        with self._state:
            self._parked.add(m.cpu)
        self._release.wait()
        with self._state:
            self._parked.discard(m.cpu)
        return True
