"""fixtures/module's C (mod.c) built for this machine and run: the firings a loaded module's probes must give."""

from __future__ import annotations

from pathlib import Path

from helpers import ROOT, sdtgen
from native import Call, build_native, run_native

MODULE = ROOT / "fixtures" / "module"


def module_firings(out: Path, calls: list[int]):
    """hkm_work(n) for each n, each probe a function printing its call."""
    exe = build_native(out, [MODULE / "mod.c"], {"hkm_work": ("long", ["int"])},
                       sdtgen("include-dir", check=True).stdout.strip())
    return run_native(exe, [Call("hkm_work", (n,)) for n in calls])
