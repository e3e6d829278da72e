"""tests/targets/anyprogram/wall.c built on the hosted platform: a program whose every firing carries the real time
(CLOCK_REALTIME, ns) it read just before, its own record of when it fired; and the machines' tests' reading of a
session's firings."""

from __future__ import annotations

import io
import json
from pathlib import Path

from helpers import SDTGEN, run

ANYPROGRAM = Path(__file__).resolve().parent / "targets" / "anyprogram"
FIRED = "wall:clock:now:fired"  # arg0 the tag, arg1 the real time the program read before it fired
# How much later than the program's own reading an event may be stamped: the trap's signal delivery, and a busy
# machine's preemption between the reading and the firing. Never less: an event is stamped after the reading.
LATE_NS = 2_000_000_000
RATE_NS = 1_000_000  # how far two clocks' rates may part (the hosted clock's calibration) over a test's run


def build_wall(out: Path) -> Path:
    run(["make", "-C", str(ANYPROGRAM), f"O={out}", f"SDTGEN={SDTGEN}", "PROG=wall"])
    return out / "wall"


def fired(out: io.StringIO) -> list[dict]:
    """The firings a JSON reporter showed."""
    return [e for e in map(json.loads, out.getvalue().splitlines()) if e["event"] == "fire"]
