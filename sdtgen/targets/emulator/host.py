"""The host process a boot runs in: its threads, and the address space every CPU costs.

Each emulated CPU is an engine (its translation cache, sized by machine.tcg_buffer_for), a host thread
when CPUs run in parallel, and a watchdog thread. Under an address-space limit (``ulimit -v``) an engine
that cannot get its cache ends the process from C with status 1 and no word of sdtgen's, so the need is
estimated and refused with one line before any engine exists.
"""

from __future__ import annotations

import contextlib
import threading

from sdtgen.errors import SdtError

THREAD_STACK = 2 << 20  # a CPU's or watchdog's host thread: Python frames over emu_start and its hooks
MALLOC_ARENAS = 4  # glibc gives each new thread a 64 MiB arena otherwise, up to 8 a core
ARENA = 64 << 20
ENGINE = 2 << 20  # what an engine takes besides its translation cache (measured: about 1 MiB)
SLACK = 64 << 20  # the interpreter's own growth while it runs


def prepare_threads() -> None:
    """Smaller thread stacks and a bounded number of malloc arenas for the threads a boot starts."""
    threading.stack_size(THREAD_STACK)
    with contextlib.suppress(OSError, AttributeError):  # not glibc: its defaults stand
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(-8, MALLOC_ARENAS)  # M_ARENA_MAX


def address_space_limit() -> int | None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def address_space_used() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return 0


def check_address_space(path: str, cpus: int, tcg_buffer: int, guest: int, rings: int, threads: int) -> None:
    """Refuse a boot whose engines, threads and memory would not fit under the address-space limit."""
    limit = address_space_limit()
    if limit is None:
        return
    need = (address_space_used() + cpus * (tcg_buffer + ENGINE) + guest + rings
            + threads * THREAD_STACK + MALLOC_ARENAS * ARENA + SLACK)
    if need > limit:
        raise SdtError(path, f"--cpus {cpus} needs about {need >> 20} MiB of address space (a translation cache of "
                       f"{tcg_buffer >> 20} MiB and threads for each CPU, the guest's memory and trace buffers), "
                       f"more than the limit of {limit >> 20} MiB (ulimit -v)",
                       "give fewer --cpus or a smaller --buffer-size, or raise the limit")
