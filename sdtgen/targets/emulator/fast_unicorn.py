"""Calling Unicorn's Python binding (2.1) at the speed a trap handler needs, without changing what it does.

A firing in trap mode costs the host some twenty binding calls. Two costs of the binding are not the
library's: every call lets the GIL go (ctypes.CDLL), and every register access looks the register's
ctypes class up in a list of ranges. Both are removed here for the calls sdtgen makes; if the binding
is not laid out as 2.1's is, calls stay as the binding makes them: slower, never different.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Unicorn's calls that return at once and never call back into Python.
SHORT_CALLS = ("uc_reg_read", "uc_reg_write", "uc_reg_read_batch", "uc_reg_write_batch", "uc_mem_read",
               "uc_mem_write", "uc_context_alloc", "uc_context_free", "uc_context_size", "uc_context_save",
               "uc_context_restore")
_short_calls_held = False


def hold_the_gil_in_short_calls() -> None:
    """Make Unicorn's short calls keep the GIL; emulation (emu_start), emu_stop and the cache controls let it go.

    The binding calls the library through ctypes.CDLL, which releases the GIL around every call. With
    several CPUs on host threads, each CPU's trap handler makes some twenty such calls a firing, and each
    hands the GIL to another CPU waiting in a hook and waits to get it back: measured, twelve futex calls
    a firing and more system time than emulation at --cpus 4. The same functions of the same library,
    called through ctypes.PyDLL, keep the GIL (they take microseconds and run no Python).
    """
    global _short_calls_held
    if _short_calls_held:
        return
    _short_calls_held = True
    import ctypes

    try:
        from unicorn.unicorn_py3 import unicorn as binding

        lib = binding.uclib
        held = ctypes.PyDLL(lib._name, handle=lib._handle)
        calls = {name: (getattr(lib, name), getattr(held, name)) for name in SHORT_CALLS}
    except (ImportError, AttributeError, OSError):
        return
    for name, (released, kept) in calls.items():
        kept.restype, kept.argtypes = released.restype, released.argtypes
        if released.errcheck is not None:
            kept.errcheck = released.errcheck
        setattr(lib, name, kept)


def look_up_register_classes_once(uc: Any) -> None:
    """Give engine ``uc`` reg_read and reg_write that look each register's class up once (the binding
    scans its ranges on every access: a third of a trap-mode firing's host time, measured)."""
    try:
        select, read, write = uc._select_reg_class, uc._reg_read, uc._reg_write
    except AttributeError:
        return
    classes: dict[int, type] = {}

    def class_of(reg_id: int) -> type:
        cls = classes.get(reg_id)
        if cls is None:
            cls = classes[reg_id] = select(reg_id)
        return cls

    def reg_read(reg_id: int, aux: Any = None) -> Any:
        return read(reg_id, class_of(reg_id), aux)

    def reg_write(reg_id: int, value: Any) -> None:
        write(reg_id, class_of(reg_id), value)

    uc.reg_read, uc.reg_write = reg_read, reg_write


def register_reader(uc: Any, reg_ids: list[int]) -> Callable[[], tuple[int, ...]]:
    """A function that reads registers ``reg_ids`` of engine ``uc`` in one library call. For registers the
    binding reads as 64-bit integers, its arrays are made once, not once a read."""
    import ctypes

    try:
        from unicorn.unicorn_py3 import unicorn as binding

        plain = all(uc._select_reg_class(r) is ctypes.c_uint64 for r in reg_ids)
        lib, handle, ok = binding.uclib, uc._uch, binding.uc.UC_ERR_OK
    except (ImportError, AttributeError):
        plain = False
    if not plain:
        return lambda: tuple(uc.reg_read_batch(reg_ids))
    count = len(reg_ids)
    ids = (ctypes.c_int * count)(*reg_ids)
    values = (ctypes.c_uint64 * count)()
    pointers = (ctypes.c_void_p * count)(*(ctypes.addressof(values) + 8 * k for k in range(count)))
    n = ctypes.c_int(count)
    read = lib.uc_reg_read_batch

    def read_all() -> tuple[int, ...]:
        ctypes.memset(values, 0, 8 * count)  # a 32-bit register fills four of its eight bytes
        status = read(handle, ids, pointers, n)
        if status != ok:
            raise binding.UcError(status)
        return tuple(values)

    return read_all
