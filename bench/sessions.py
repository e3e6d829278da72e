"""`make bench`'s session rows on this machine's CPU (docs/sessions.md; bench/run.py, session_rows): programs on
the hosted platform, built through fixtures/process's Makefile as a process user builds them, run in interleaved
rounds:

- bench/cpu_sdtgen.c (the real-CPU row's program, bench/cpu.py) built three times: from this tree, from the tree
  before the runtime's sessions (PRE_SESSIONS, taken out of git) and from the tree with sessions before task
  context (SESSIONS_NO_TASK): what a firing into the default session costs against what it cost before;
- bench/sessions.c: a firing recorded into 1, 2, 4 and 8 sessions, into one session other than the default, and
  the probe disarmed while another session keeps another probe's site armed;
- bench/flight.c: the fixture kernel running bench/mix.c with and without an always-on flight recorder of every
  probe.

Every case's rings are read back in the program (bench/session_tally.h) and each count held against the firings
it made; the flight recorder's against the native run of the same mix (tools/native.py). Nothing asserts a time.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
SDTGEN = str(Path(sys.executable).with_name("sdtgen"))
if str(ROOT / "tools") not in sys.path:
    sys.path.append(str(ROOT / "tools"))

# The main line just before the runtime's sessions were merged (2aa6a13's first parent), and the main line with
# them but before task context was merged (b1d6ebc's first parent).
PRE_SESSIONS = "332bd730a78ee23c781c15769d5c0fa874d85309"
SESSIONS_NO_TASK = "0e000edb5c01ea3580dbb78b35cef4d3f9a256b1"
MAX_SESSIONS = 8  # SDT_MAX_SESSIONS, the default session included
SESSION_CASES = ("k1", "one", "k2", "k4", "k8")
PROBE, OTHER = "bench:cpu:loop:fire", "bench:cpu:other:fire"


class Unavailable(Exception):
    """A baseline this checkout cannot build (no git history): the rows that need it say why."""


def run(cmd: list[str], **kw) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if out.returncode:
        raise SystemExit(f"bench: {' '.join(map(str, cmd))} failed ({out.returncode}): "
                         f"{(out.stderr or out.stdout)[-800:]}")
    return out.stdout


def build(out: Path, exe: str, kernel: list[Path], program: list[Path], kernel_cflags: str = "",
          sdtgen: str = SDTGEN, tree: Path = ROOT) -> Path:
    """``program`` with the probes of ``kernel`` on the hosted platform, through ``tree``'s fixtures/process
    Makefile and ``sdtgen``: the program."""
    run(["make", "-s", "-C", str(tree / "fixtures" / "process"), f"O={out}", f"SDTGEN={sdtgen}",
         f"KERNEL_SRCS={' '.join(map(str, kernel))}", f"KERNEL_CFLAGS={kernel_cflags}",
         f"PROGRAM_SRCS={' '.join(map(str, program))}", f"EXE={exe}"])
    return out / exe


def cpu_sites() -> list[Path]:
    return [BENCH / f"cpu_site{form}.c" for form in ("", "_out", "_goto")]


def build_cpu(work: Path, commit: str | None = None) -> Path:
    """bench/cpu_sdtgen.c built by this tree, or by the tree of ``commit`` (its sdtgen, runtime and Makefile,
    taken out of git; the bench's own sources are this tree's): the program. Unavailable without that history."""
    if commit is None:
        return build(work / "cpu-now", "cpu-sdtgen", cpu_sites(), [BENCH / "cpu_sdtgen.c"])
    d = work / f"cpu-{commit[:12]}"
    tree = d / "tree"
    if not (tree / "sdtgen" / "__init__.py").exists():
        shutil.rmtree(d, ignore_errors=True)
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "sdtgen", "fixtures/process"],
                                 capture_output=True)
        if archive.returncode:
            shutil.rmtree(d)
            raise Unavailable(f"commit {commit[:12]} is not in this checkout's git history "
                              f"({archive.stderr.decode().strip()[-200:] or 'git failed'})")
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    # That tree's sdtgen, never this one's: its package first on the path, and no current directory (-P).
    wrapper = d / "sdtgen"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={tree} exec {sys.executable} -P -m sdtgen "$@"\n')
    wrapper.chmod(0o755)
    return build(d / "out", "cpu-sdtgen", cpu_sites(), [BENCH / "cpu_sdtgen.c"], sdtgen=str(wrapper), tree=tree)


def build_sessions(work: Path) -> Path:
    return build(work / "sessions", "cpu-sessions",
                 [BENCH / "cpu_site.c", BENCH / "cpu_site_goto.c", BENCH / "cpu_site_other.c"],
                 [BENCH / "sessions.c"])


def build_flight(work: Path) -> Path:
    kernel = ROOT / "fixtures" / "kernel"
    return build(work / "flight", "flight-proc", sorted(kernel.glob("*.c")), [BENCH / "flight.c", BENCH / "mix.c"],
                 kernel_cflags=f"-I{kernel}")


def probe_keys(exe: Path) -> dict[int, str]:
    """Each probe's key in ``exe`` (what its events carry), to its spec."""
    from sdtgen.image import Image

    with Image(str(exe)) as img:
        return {p.key: p.spec for p in img.probes()}


def native_mix(work: Path, iterations: int) -> Counter:
    """The firings of each probe of one bench_mix(iterations), by the fixture kernel's own C run natively
    (tools/native.py: every probe a function printing its call), as the flight recorder must record them."""
    from native import Call, build_native, run_native

    d = work / "native-mix"
    d.mkdir(parents=True, exist_ok=True)
    src = d / "src"  # bench/mix.c alone, so that no other bench source is read for probes
    src.mkdir(exist_ok=True)
    shutil.copy(BENCH / "mix.c", src / "mix.c")
    include = run([SDTGEN, "include-dir"]).strip()
    exe = build_native(d, [ROOT / "fixtures" / "kernel", src / "mix.c"], {"bench_mix": ("long", ["int"])}, include)
    return Counter(e["probe"] for e in run_native(exe, [Call("bench_mix", (iterations,))]) if "probe" in e)


@dataclass
class Measured:
    """Per-round figures of every program, over every outer round: ns an event or an iteration."""

    cpu: dict[str, list[float]] = field(default_factory=dict)  # "now", "pre", "no_task": branch-armed ns/event
    sessions: dict[str, list[float]] = field(default_factory=dict)  # bench/sessions.c's cases
    flight: dict[str, list[float]] = field(default_factory=dict)  # bench/flight.c's cases
    rounds: int = 0
    problems: list[str] = field(default_factory=list)  # counts that are not what the firings say
    read: str = ""  # what the sessions' rings held, said
    flight_read: str = ""
    events_per_iteration: float = 0.0
    unavailable: dict[str, str] = field(default_factory=dict)  # baseline -> why it is left out

    def add(self, into: dict[str, list[float]], values: dict[str, float | list[float]]) -> None:
        for k, v in values.items():
            into.setdefault(k, []).extend(v if isinstance(v, list) else [v])


def check_sessions(out: dict, keys: dict[int, str]) -> tuple[list[str], str]:
    """What bench/sessions.c's rings held against the firings it made: each session the probe's events of every
    loop it enabled it for, session 1 also the other probe's one a round, nothing else, nothing lost."""
    problems = []
    spec = {v: k for k, v in keys.items()}
    total = 0
    for s, (read, expected) in enumerate(zip(out["read"], out["expected"], strict=True)):
        want = {str(spec[PROBE]): expected} if expected else {}
        if s == 1 and out["expected_other"]:
            want[str(spec[OTHER])] = out["expected_other"]
        if read["keys"] != want or read["torn"] or out["discarded"][s]:
            problems.append(f"session {s} read {read['keys']} ({read['torn']} torn, {out['discarded'][s]} "
                            f"discarded), fired {want}")
        total += read["events"]
    said = f"{total:,} events read back in {MAX_SESSIONS} sessions, {sum(out['discarded'])} discarded"
    return problems, said


def check_flight(out: dict, keys: dict[int, str], native: Counter) -> tuple[list[str], str, float]:
    """bench/flight.c's flight recorder and default session each held every firing of every loop it recorded:
    loops x the native run's count of each probe; the lapped flight recorder's events read and overwritten are
    every firing, and it did lap; and the events an iteration."""
    problems = []
    for case in ("flight", "default"):
        read = out["read"][case]
        got = Counter({keys[int(k)]: v for k, v in read["keys"].items()})
        want = Counter({p: v * out["loops"][case] for p, v in native.items()})
        if got != want or read["torn"] or out["read"][f"{case}_lost"]:
            problems.append(f"the {case} session read {dict(got)} ({read['torn']} torn, {out['read'][f'{case}_lost']}"
                            f" lost), the native run's firings x {out['loops'][case]} loops are {dict(want)}")
    read, lost = out["read"]["lapped"], out["read"]["lapped_lost"]
    fired = sum(native.values()) * out["loops"]["lapped"]
    if read["events"] + lost != fired or not lost or read["torn"]:
        problems.append(f"the lapped flight recorder read {read['events']} events and lost {lost} to overwrite "
                        f"({read['torn']} torn), the native run's firings x {out['loops']['lapped']} loops are {fired}")
    per = sum(native.values()) / out["iterations"]
    read = out["read"]["flight"]
    said = f"{read['events']:,} events of {len(native)} probes, each the native run's count x " \
           f"{out['loops']['flight']} loops, {out['read']['flight_lost']} lost"
    return problems, said, per


def measure(work: Path, small: bool) -> Measured:
    """ROUNDS outer rounds, each running every program in turn (the three cpu-sdtgen builds, cpu-sessions,
    flight-proc), each program its own inner rounds: per-round figures, for medians and their spread."""
    work.mkdir(parents=True, exist_ok=True)
    m = Measured()
    cpus = {"now": build_cpu(work)}
    for name, commit in (("pre", PRE_SESSIONS), ("no_task", SESSIONS_NO_TASK)):
        try:
            cpus[name] = build_cpu(work, commit)
        except Unavailable as e:
            m.unavailable[name] = str(e)
    sessions, flight = build_sessions(work), build_flight(work)
    skeys, fkeys = probe_keys(sessions), probe_keys(flight)
    # Short loops, many, each figure a round's best: a loop a few hundred microseconds long meets a quiet moment of
    # a shared machine where a long one does not. The rings are read between loops, outside the time.
    n, n_off, iterations, inner, cpu_rounds, outer = (20_000, 20_000, 2_000, 2, 5, 2) if small else \
        (20_000, 20_000, 2_000, 7, 15, 7)
    native = native_mix(work, iterations)
    trace = Path(tempfile.mkdtemp(prefix="sdtgen-bench-sessions-"))
    try:
        for _ in range(outer):
            for name, exe in cpus.items():  # before, with sessions, now: in turn
                out = json.loads(run([str(exe), str(n), str(n_off), "1", str(cpu_rounds), str(trace)]))
                if out["read"] != out["fired"] or out["discarded"]:
                    m.problems.append(f"cpu-sdtgen ({name}) read {out['read']} of {out['fired']} events, "
                                      f"{out['discarded']} discarded")
                m.add(m.cpu, {name: out["branch"]})
                for stream in trace.glob("stream_*"):
                    stream.unlink()
            out = json.loads(run([str(sessions), str(n), str(n_off), str(inner)]))
            problems, m.read = check_sessions(out, skeys)
            m.problems += problems
            m.add(m.sessions, out["ns"])
            out = json.loads(run([str(flight), str(iterations), str(inner)]))
            problems, m.flight_read, m.events_per_iteration = check_flight(out, fkeys, native)
            m.problems += problems
            m.add(m.flight, out["ns"])
            m.rounds += 1
    finally:
        shutil.rmtree(trace, ignore_errors=True)
    return m


def median_ratio(num: list[float], den: list[float], scale: float = 1.0) -> tuple[float, float, float]:
    """The median of the per-round ratios num / (scale x den), and their lowest and highest: the noise."""
    ratios = [a / (scale * b) for a, b in zip(num, den, strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)
