"""`make bench`'s real-CPU comparison: one loop (bench/cpu_loop.h: an event with two integer arguments, the clock
included) in three programs built here with the real tools, run in interleaved rounds:

- sdtgen (bench/cpu_sdtgen.c): the probe on the hosted platform (fixtures/process's Makefile builds it as a
  process user would), compiled out, disabled, armed with a branch and with a breakpoint, its packets
  written to stream files by the platform's consumer thread;
- LTTng-UST 2.13 (bench/cpu_lttng.c, the provider bench/cpu_lttng_tp.h) in a session created, enabled and
  started with `lttng`;
- barectf 3 (bench/barectf.yaml, `barectf generate`; bench/cpu_barectf.c) with a file platform.

Every trace is read back with babeltrace2: a comparison whose trace holds nothing is invalid.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
SDTGEN = str(Path(sys.executable).with_name("sdtgen"))
BARECTF = str(Path(sys.executable).with_name("barectf"))
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CFLAGS = ["-O2", "-Wall", "-Wextra", f"-I{BENCH}"]


@dataclass
class Run:
    """A program's figures over every round: the best ns an iteration of each loop, and its events: fired,
    and found in its trace by babeltrace2."""

    ns: dict[str, float] = field(default_factory=dict)
    fired: int = 0
    recorded: int = 0

    def add(self, ns: dict[str, float], fired: int) -> None:
        for k, v in ns.items():
            self.ns[k] = min(v, self.ns.get(k, v))
        self.fired += fired


def missing() -> dict[str, str]:
    """What each comparison lacks on this machine (how to get it); nothing for one that can run."""
    why = {}
    if shutil.which("babeltrace2") is None:
        why["sdtgen"] = "babeltrace2 not found (apt-get install babeltrace2)"
    lttng = [t for t in ("lttng", "lttng-sessiond") if shutil.which(t) is None]
    if lttng or not any(Path("/usr/include").glob("**/lttng/tracepoint.h")):
        why["lttng"] = "LTTng-UST or lttng-tools not found (apt-get install liblttng-ust-dev lttng-tools)"
    if not Path(BARECTF).exists():
        why["barectf"] = f"{BARECTF} not found (`make bench` installs barectf 3.1.2 into the virtual environment)"
    for k in ("lttng", "barectf"):
        if "sdtgen" in why:
            why.setdefault(k, why["sdtgen"])
    return why


def run(cmd: list[str], **kw) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if out.returncode:
        raise SystemExit(f"bench: {' '.join(cmd)} failed ({out.returncode}): {(out.stderr or out.stdout)[-800:]}")
    return out.stdout


def build_sdtgen(work: Path) -> tuple[Path, Path]:
    """bench/cpu_sdtgen.c on the hosted platform, through fixtures/process's Makefile: (program, CTF metadata)."""
    out = work / "sdtgen"
    sites = " ".join(str(BENCH / f"cpu_site{form}.c") for form in ("", "_out", "_goto"))
    run(["make", "-s", "-C", str(ROOT / "fixtures" / "process"), f"O={out}", f"SDTGEN={SDTGEN}",
         f"KERNEL_SRCS={sites}", "KERNEL_CFLAGS=", f"PROGRAM_SRCS={BENCH / 'cpu_sdtgen.c'}", "EXE=cpu-sdtgen"])
    return out / "cpu-sdtgen", out / "metadata"


def build_barectf(work: Path) -> tuple[Path, Path]:
    """bench/barectf.yaml through `barectf generate`, and bench/cpu_barectf.c: (program, CTF metadata)."""
    out = work / "barectf"
    out.mkdir(parents=True, exist_ok=True)
    run([BARECTF, "generate", f"--code-dir={out}", f"--headers-dir={out}", f"--metadata-dir={out}",
         str(BENCH / "barectf.yaml")])
    exe = out / "cpu-barectf"
    run(["gcc", *CFLAGS, "-Wno-unused-function", f"-I{out}", "-o", str(exe), str(BENCH / "cpu_barectf.c"),
         str(BENCH / "cpu_barectf_site.c"), str(out / "barectf.c")])
    return exe, out / "metadata"


def build_lttng(work: Path) -> Path:
    out = work / "lttng"
    out.mkdir(parents=True, exist_ok=True)
    exe = out / "cpu-lttng"
    run(["gcc", *CFLAGS, "-o", str(exe), str(BENCH / "cpu_lttng.c"), str(BENCH / "cpu_lttng_site.c"),
         "-llttng-ust", "-ldl"])
    return exe


def events_in(trace: Path) -> int:
    """The events babeltrace2 reads in the CTF trace under ``trace`` (its counter sink)."""
    out = run(["babeltrace2", str(trace), "-c", "sink.utils.counter", "-p", "step=+0"])
    m = re.search(r"^\s*(\d+) Event messages?$", out, re.M)
    return int(m.group(1)) if m else 0


@contextmanager
def lttng_session(trace: Path):
    """An LTTng session recording bench:fire into ``trace``: created, enabled and started with `lttng` (a
    session daemon of the bench's own when none runs, stopped after), then stopped and destroyed."""
    daemon = None
    if subprocess.run(["lttng", "list"], capture_output=True).returncode:
        daemon = subprocess.Popen(["lttng-sessiond", "--no-kernel"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while subprocess.run(["lttng", "list"], capture_output=True).returncode:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("bench: lttng-sessiond did not start")
            time.sleep(0.1)
    name = f"sdtgen-bench-{os.getpid()}"
    try:
        run(["lttng", "create", name, f"--output={trace}"])
        try:
            # Buffers a round's events fit in, as sdtgen's ring (the consumer daemon reads them meanwhile).
            run(["lttng", "enable-channel", "--userspace", f"--session={name}", "--subbuf-size=4M",
                 "--num-subbuf=8", "bench"])
            run(["lttng", "enable-event", "--userspace", f"--session={name}", "--channel=bench", "bench:fire"])
            run(["lttng", "start", name])
            yield
            run(["lttng", "stop", name])
        finally:
            run(["lttng", "destroy", name])
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait()


def measure(work: Path, small: bool) -> tuple[dict[str, Run], dict[str, str]]:
    """Each program's Run over ROUNDS rounds (each runs the sdtgen, LTTng and barectf programs in turn, each
    program the best of 3 loops), and what kept a comparison out (``missing``)."""
    work.mkdir(parents=True, exist_ok=True)
    why = missing()
    if why and IN_CI:
        raise SystemExit("bench: " + "; ".join(why.values()) + " (CI installs it in .ci/run)")
    n, n_off, n_trap, rounds = (50_000, 100_000, 500, 3) if small else (200_000, 400_000, 2_000, 7)
    inner = "3"
    progs = {}
    if "sdtgen" not in why:
        progs["sdtgen"] = build_sdtgen(work)
    if "barectf" not in why:
        progs["barectf"] = build_barectf(work)
    if "lttng" not in why:
        progs["lttng"] = build_lttng(work), None
    runs = {k: Run() for k in progs}
    traces = work / "traces"
    shutil.rmtree(traces, ignore_errors=True)

    def one(k: str, r: int) -> None:
        exe, metadata = progs[k]
        trace = traces / f"{k}-{r}"
        if k == "sdtgen":
            trace.mkdir(parents=True)
            shutil.copy(metadata, trace / "metadata")
            out = json.loads(run([str(exe), str(n), str(n_off), str(n_trap), inner, str(trace)]))
            ns = {m: out[m] for m in ("out", "off", "goto", "branch", "trap")}
        elif k == "barectf":
            trace.mkdir(parents=True)
            shutil.copy(metadata, trace / "metadata")
            out = json.loads(run([str(exe), str(n), inner, str(trace / "stream")]))
            ns = {"event": out["event"]}
        else:
            out = json.loads(run([str(exe), str(n), inner]))
            ns = {"event": out["event"]}
        runs[k].add(ns, out["fired"])
        if k != "lttng":
            runs[k].recorded += events_in(trace)
            shutil.rmtree(trace)  # hundreds of MiB over a run

    with lttng_session(traces / "lttng") if "lttng" in progs else _nothing():
        for r in range(rounds):
            for k in progs:
                one(k, r)
    if "lttng" in progs:
        runs["lttng"].recorded = events_in(traces / "lttng")
        shutil.rmtree(traces / "lttng")
    return runs, why


@contextmanager
def _nothing():
    yield
