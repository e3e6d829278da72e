"""The fixture kernel's own C, compiled for this machine and run natively (tools/native.py): the
firings and return values the emulated boot must reproduce, with the fixture's real prototypes."""

from __future__ import annotations

from pathlib import Path

from helpers import FIXTURE, sdtgen
from native import Call, build_native, data_symbolizer, run_native

# The fixture's callable functions with their real C prototypes.
PROTOTYPES = {
    "kmain": ("long", ["int"]),
    "vfs_lookup_id": ("int", ["int"]),
    "sched_run": ("long", ["int"]),
    "sched_switch": ("long", ["int", "int", "int", "int", "long", "unsigned long"]),
    "kmem_alloc": ("long", ["long"]),
    "proc_exec": ("int", ["int"]),
    "proc_exit": ("void", ["int"]),
}

__all__ = ["PROTOTYPES", "Call", "build_fixture_native", "data_symbolizer", "run_native"]


def build_fixture_native(out: Path) -> Path:
    return build_native(out, [FIXTURE], PROTOTYPES, sdtgen("include-dir", check=True).stdout.strip())
