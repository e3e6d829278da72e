"""fixtures/module's C (mod.c) built for this machine and run: the firings a loaded module's probes must give."""

from __future__ import annotations

import io
import json
from pathlib import Path

from helpers import ROOT, sdtgen
from native import Call, build_native, run_native

MODULE = ROOT / "fixtures" / "module"


def module_firings(out: Path, calls: list[int]):
    """hkm_work(n) for each n, each probe a function printing its call."""
    exe = build_native(out, [MODULE / "mod.c"], {"hkm_work": ("long", ["int"])},
                       sdtgen("include-dir", check=True).stdout.strip())
    return run_native(exe, [Call("hkm_work", (n,)) for n in calls])


def booted_with_modules(kernel_image, out: io.StringIO):
    """A session booting ``kernel_image`` in the emulator with its module area mapped, its JSON events to ``out``."""
    from sdtgen.session.reporter import Reporter
    from sdtgen.session.starts import open_session

    return open_session("emulator", str(kernel_image), Reporter(as_json=True, out=out), modules=True)


def session_firings(out: io.StringIO) -> list[dict]:
    """A session's firings and returns from its JSON events, as the native harness prints them."""
    events = []
    for line in out.getvalue().splitlines():
        e = json.loads(line)
        if e["event"] == "fire":
            events.append({"probe": e["probe"], "args": e["args"]})
        elif e["event"] == "return":
            events.append({"return": e["value"]})
    return events
