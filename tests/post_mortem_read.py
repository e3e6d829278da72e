"""What the post-mortem tests read a salvaged trace with: babeltrace2 (Debian's python3-bt2), and the native run's
firings of the fixture's scheduler loop, CPU by CPU."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import ROOT, run, unavailable

READER = ROOT / "tests" / "trace" / "bt2_read.py"


def bt2_rows(trace: Path) -> list[dict]:
    """The trace as babeltrace2 reads it: one dict per event (name, cpu, ts, fields) or discarded-events message."""
    python = "/usr/bin/python3"
    if not Path(python).exists() or run([python, "-c", "import bt2"], check=False).returncode:
        unavailable("babeltrace2's Python bindings not found: apt-get install python3-bt2")
    proc = run([python, str(READER), str(trace)], check=False)
    assert proc.returncode == 0, f"babeltrace2 refused {trace}: {proc.stderr[-2000:]}"
    return [json.loads(x) for x in proc.stdout.splitlines()]


def events_by_cpu(rows: list[dict]) -> dict[int, list[tuple[str, list]]]:
    """Each CPU's events in the order babeltrace2 gives them: (probe, its arguments in order)."""
    out: dict[int, list[tuple[str, list]]] = {}
    for r in rows:
        if "name" in r:
            out.setdefault(r["cpu"], []).append((r["name"], list(r["fields"].values())))
    return out


def native_firings(native_exe: Path, ticks: int) -> list[tuple[str, list]]:
    """sched_run(ticks) run natively: its firings, in order."""
    from native import Call, run_native

    return [(e["probe"], e["args"]) for e in run_native(native_exe, [Call("sched_run", (ticks,))]) if "probe" in e]
