"""make mutate: a mutation pass over the runtime and the host's stream, frame and program code.

Mutants come from real tools (tools/mutants.py: universalmutator for C, cosmic-ray for Python). A seeded
sample of them, split evenly over the files, runs in scratch copies of the tree (one per worker, never the
working tree: a crash leaves at most a directory under the system's temp dir, never a mutated file here), each
against only the test files that cover its file (tools/mutate_map.py), stopping at the first failure. Before
its mutants, each file's tests run once unmutated: a file whose tests fail as they are has no score, and the
time they take bounds its mutants' runs (three times it, and a minute more; a mutant that runs past it, an
endless loop most often, counts as killed). A C mutant that does not compile, or compiles to the very object
the file compiles to, is no mutant and is drawn again; so is a Python mutant that changes only an annotation.

It writes docs/mutation.md: the score per file against the target (90 % for the runtime and the stream
readers), the survivors (file, line, the change, the key), and the survivors known to be equivalent with the
reason, from tools/mutation_equivalent.txt (KEY PATH REASON, one a line). Equivalent mutants do not count.

    tools/mutate.py [--sample N] [--seed S] [--jobs J] [--budget SECONDS] [--max-tests N] [--file PATH]...
                    [--output FILE]
    tools/mutate.py --show KEY [--file PATH]...     (a mutant of the report, as a diff)

Environment: MUTATE_SAMPLE, MUTATE_SEED, MUTATE_JOBS, MUTATE_BUDGET, MUTATE_MAX_TESTS, MUTATE_FILES
(space-separated) give the defaults. The budget ends the run in time: mutants not started by then are
reported as not run. --max-tests keeps a file whose tests are the whole suite (sdt_manage.c) to the few
likeliest to kill, so that a survivor costs minutes, not the suite.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import hashlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path

from mutants import Mutant, diff, mutants_of, python_redundant, quotas, shown, shuffled
from mutate_map import covering_tests

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.90
# The runtime and the stream readers: the files the issue holds to TARGET.
TARGETED = ("sdtgen/runtime/", "sdtgen/trace/streams.py", "sdtgen/trace/packets.py", "sdtgen/transport/frames.py",
            "sdtgen/transport/packet_sink.py", "sdtgen/transport/consumer.py")
DEFAULT_FILES = [
    "sdtgen/runtime/sdt_transport.c", "sdtgen/runtime/sdt_module.c", "sdtgen/runtime/sdt_program.c",
    "sdtgen/runtime/sdt_aggregate.c", "sdtgen/runtime/sdt_control.c", "sdtgen/runtime/sdt_control_programs.c",
    "sdtgen/runtime/sdt_manage.c", "sdtgen/runtime/sdt_state.c", "sdtgen/runtime/sdt_serial.c",
    "sdtgen/transport/frames.py", "sdtgen/transport/packet_sink.py", "sdtgen/transport/consumer.py",
    "sdtgen/trace/streams.py",
    "sdtgen/trace/packets.py", "sdtgen/dscript/compiler.py", "sdtgen/dscript/merge.py", "sdtgen/check.py",
]
# Defaults sized for an hour on two cores (docs/mutation.md says what a run took).
DEFAULT_SAMPLE = 45
DEFAULT_BUDGET = 3000
DEFAULT_MAX_TESTS = 6
GRACE = 300  # seconds past the budget that a mutant started before it may run
EQUIVALENT = "tools/mutation_equivalent.txt"
# How a C mutant is compiled to tell an invalid or redundant one: the kernel-style flags the runtime builds with.
CFLAGS = ["-O2", "-ffreestanding", "-fno-pic", "-w"]


@dataclasses.dataclass
class Config:
    root: Path
    files: list[str]
    sample: int
    seed: int
    jobs: int = 1
    budget: float = DEFAULT_BUDGET
    tests: dict[str, list[str]] | None = None  # path -> test files; derived (mutate_map) when None
    max_tests: int = 0  # run only the first N covering test files (the likeliest killers); 0: all
    include: list[str] = dataclasses.field(default_factory=lambda: ["sdtgen/include"])
    equivalent: str = EQUIVALENT
    targeted: tuple[str, ...] = TARGETED


@dataclasses.dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed, timeout, survived, equivalent, not run
    seconds: float = 0.0
    detail: str = ""  # the test that failed first, or why it is equivalent


@dataclasses.dataclass
class FileResult:
    path: str
    generated: int
    tests: list[str]
    covering: int = 0  # covering test files found, of which ``tests`` are the ones run
    baseline: str = "not run"  # passed, failed (with the tail of its output), not run
    baseline_seconds: float = 0.0
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)  # why -> how many drawn and put back
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)

    def count(self, *statuses: str) -> int:
        return sum(o.status in statuses for o in self.outcomes)

    def score(self) -> float | None:
        judged = self.count("killed", "timeout", "survived")
        return self.count("killed", "timeout") / judged if judged else None


# --- scratch trees ------------------------------------------------------------------------------------------

def tree_files(root: Path) -> list[str]:
    """The tree as git sees it (tracked files and untracked ones not ignored), or every file when not a
    checkout; never .venv, build or caches."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout.decode()
        return [f for f in out.split("\0") if f and (root / f).is_file()]
    except (subprocess.CalledProcessError, FileNotFoundError):
        return [p.relative_to(root).as_posix() for p in root.rglob("*")
                if p.is_file() and not ({".venv", ".git", "build", "__pycache__"} & set(p.relative_to(root).parts))]


class Scratch:
    """A copy of the tree for one worker. A mutant is written into it, and put back after, in it alone."""

    def __init__(self, root: Path, files: list[str]):
        self.dir = Path(tempfile.mkdtemp(prefix="sdtgen-mutate-"))
        for f in files:
            (self.dir / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / f, self.dir / f)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


# The pytest runs under way, so that an interrupted run ends them (each in its own session, with what it
# started) rather than leave them running on.
_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()
_stop = threading.Event()


def stop_all() -> None:
    _stop.set()
    with _running_lock:
        for proc in _running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def run_tests(scratch: Path, tests: list[str], timeout: float) -> tuple[str, float, str]:
    """(passed | failed | timeout, seconds, the last lines of the output) of pytest on ``tests`` in the scratch
    tree, importing the scratch tree's sdtgen (PYTHONPATH ahead of the editable install's path)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(scratch), os.environ.get("PYTHONPATH", "")]),
           "PYTHONDONTWRITEBYTECODE": "1",  # a mutant as long as the original, in the same second: no stale .pyc
           "CI": "true"}  # a tool missing fails the baseline rather than skipping what would kill
    basetemp = scratch / ".mutate-tmp"
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
           f"--basetemp={basetemp}", *tests]
    start = time.monotonic()
    with _running_lock:
        if _stop.is_set():
            return "stopped", 0.0, ""
        proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        _running.add(proc)
    try:
        out, _ = proc.communicate(timeout=timeout)
        status = "passed" if proc.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # pytest and whatever it started: emulators, QEMU, compilers
        out, _ = proc.communicate()
        status = "timeout"
    finally:
        with _running_lock:
            _running.discard(proc)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # All of it: a failure's summary line can be longer than any tail kept (a long assertion message).
    return status, time.monotonic() - start, out.decode(errors="replace")


def first_failure(output: str) -> str:
    """The first test that failed (pytest's summary line, without its message), else the output's last line."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" - ")[0][:200]
    return output.strip().splitlines()[-1][:200] if output.strip() else ""


# --- choosing the sample ------------------------------------------------------------------------------------

def compile_unit(root: Path, path: str) -> Path:
    """The file gcc compiles for ``path``: a sibling that #includes it (sdt_runtime.c includes the runtime's
    parts), or the file itself."""
    src = root / path
    for other in sorted(src.parent.glob("*.c")):
        if other != src and f'#include "{src.name}"' in other.read_text(errors="replace"):
            return other
    return src


def c_object(scratch: Path, path: str, include: list[str]) -> bytes | None:
    unit = compile_unit(scratch, path)
    out = scratch / ".mutate-obj" / (hashlib.sha1(path.encode()).hexdigest()[:8] + ".o")
    out.parent.mkdir(exist_ok=True)
    incs = [f"-I{scratch / i}" for i in include] + [f"-I{unit.parent}"]
    proc = subprocess.run(["gcc", *CFLAGS, *incs, "-c", str(unit), "-o", str(out)], capture_output=True)
    return out.read_bytes() if proc.returncode == 0 else None


def rejection(scratch: Path, m: Mutant, text: str, original: str, reference: bytes | None,
              include: list[str]) -> str | None:
    """Why a drawn mutant is no mutant, or None."""
    if m.path.endswith(".py"):
        return python_redundant(original, text)
    target = scratch / m.path
    target.write_text(text)
    try:
        obj = c_object(scratch, m.path, include)
    finally:
        target.write_text(original)
    if obj is None:
        return "does not compile"
    if obj == reference:
        return "compiles to the same object"
    return None


# --- the run ------------------------------------------------------------------------------------------------

def load_equivalent(root: Path, name: str) -> dict[str, str]:
    """KEY -> reason, from the hand-kept list (KEY PATH REASON; # starts a comment)."""
    path = root / name
    known = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                key, _path, reason = [*line.split(None, 2), "", ""][:3]
                known[key] = reason.strip()
    return known


def run(cfg: Config, log=print, chosen: dict[str, list[Mutant]] | None = None) -> list[FileResult]:
    """Draw the sample (or run the mutants ``chosen`` names), run each, and return every file's results."""
    deadline = time.monotonic() + cfg.budget
    files = tree_files(cfg.root)
    equivalent = load_equivalent(cfg.root, cfg.equivalent)
    pool_dirs: queue.Queue[Scratch] = queue.Queue()
    scratches = [Scratch(cfg.root, files) for _ in range(max(1, cfg.jobs))]
    for s in scratches:
        pool_dirs.put(s)
    results: dict[str, FileResult] = {}
    lock = threading.Lock()
    # No `with pool`: its exit waits for every queued mutant before an interrupt could stop them.
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(scratches))
    try:
        def with_scratch(fn, *args):
            s = pool_dirs.get()
            try:
                return fn(s.dir, *args)
            finally:
                pool_dirs.put(s)

        given, chosen = chosen, {}
        share = quotas(cfg.files, cfg.sample)
        for path in cfg.files:
            all_mutants = mutants_of(cfg.root, path)
            tests = cfg.tests.get(path, []) if cfg.tests is not None else covering_tests(cfg.root, path)
            fr = results[path] = FileResult(path, len(all_mutants), list(tests[:cfg.max_tests or None]),
                                            len(tests))
            chosen[path] = (given[path] if given is not None else
                            draw(cfg, fr, shuffled(all_mutants, cfg.seed), share[path], pool, with_scratch))
            log(f"{path}: {len(all_mutants)} mutants, {len(chosen[path])} drawn, {len(fr.tests)} test files")

        def baseline(scratch: Path, fr: FileResult) -> None:
            if not fr.tests:
                fr.baseline = "no covering tests"
                return
            if time.monotonic() > deadline:
                return
            status, secs, out = run_tests(scratch, fr.tests, max(60.0, deadline - time.monotonic()))
            if _stop.is_set():
                return
            fr.baseline, fr.baseline_seconds = status, secs
            if status != "passed":
                fr.baseline = f"{status}: {first_failure(out)}"
            log(f"{fr.path}: its {len(fr.tests)} test files {status} unmutated in {secs:.0f} s")

        list(pool.map(lambda fr: with_scratch(baseline, fr), [results[p] for p in cfg.files if chosen[p]]))

        def one(scratch: Path, m: Mutant) -> None:
            fr = results[m.path]
            if fr.baseline != "passed" or time.monotonic() > deadline:
                outcome = Outcome(m, "not run", detail="the budget ran out" if fr.baseline in ("passed", "not run")
                                  else "its tests do not pass unmutated")
            else:
                target = scratch / m.path
                original = target.read_text()
                target.write_text(m.text())
                # A mutant's own limit, or the run's: the budget plus a grace of five minutes, so that one
                # started late cannot carry the run past its hour. Cut by the run's, it was not judged.
                natural = 3 * fr.baseline_seconds + 60
                limit = min(natural, max(30.0, deadline + GRACE - time.monotonic()))
                try:
                    status, secs, out = run_tests(scratch, fr.tests, limit)
                finally:
                    target.write_text(original)
                if _stop.is_set():
                    return
                if status == "timeout" and limit < natural:
                    status = "cut"
                outcome = Outcome(m, {"passed": "survived", "failed": "killed", "timeout": "timeout",
                                      "cut": "not run"}[status], secs,
                                  first_failure(out) if status == "failed" else
                                  "cut at the end of the budget" if status == "cut" else "")
                if outcome.status == "survived" and m.key in equivalent:
                    outcome = Outcome(m, "equivalent", secs, equivalent[m.key])
                log(f"{m.path}:{m.line} {m.key} {outcome.status} ({secs:.0f} s): {m.before} => {m.after}")
            with lock:
                fr.outcomes.append(outcome)

        # Round robin over the files, so a budget that runs out leaves every file some mutants run.
        order = [m for i in range(max((len(c) for c in chosen.values()), default=0))
                 for p in cfg.files for m in chosen[p][i:i + 1]]
        list(pool.map(lambda m: with_scratch(one, m), order))
    except BaseException:  # Ctrl-C, SIGTERM: end what runs, start nothing more, leave no scratch tree
        stop_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for s in scratches:
            s.remove()
    for fr in results.values():
        fr.outcomes.sort(key=lambda o: (o.mutant.line, o.mutant.key))
    return [results[p] for p in cfg.files]


def draw(cfg: Config, fr: FileResult, candidates: list[Mutant], want: int, pool, with_scratch) -> list[Mutant]:
    """The first ``want`` candidates that are real mutants, checked a batch (one per worker) at a time: the
    same seed draws the same mutants however many workers check them."""
    if want <= 0:
        return []
    original = (cfg.root / fr.path).read_text()
    reference = with_scratch(lambda s: c_object(s, fr.path, cfg.include)) if fr.path.endswith(".c") else None
    taken: list[Mutant] = []
    batch = max(1, cfg.jobs)
    for i in range(0, len(candidates), batch):
        chunk = candidates[i:i + batch]
        why = list(pool.map(lambda m: with_scratch(lambda s: rejection(s, m, m.text(), original, reference,
                                                                         cfg.include)), chunk))
        for m, reason in zip(chunk, why, strict=True):
            if len(taken) == want:
                break
            if reason:
                fr.rejected[reason] = fr.rejected.get(reason, 0) + 1
            else:
                taken.append(m)
        if len(taken) == want:
            break
    return taken


# --- the report ---------------------------------------------------------------------------------------------

def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f} %"


def summary_lines(cfg: Config, results: list[FileResult]) -> list[str]:
    lines = []
    for fr in results:
        target = any(fr.path.startswith(t) for t in cfg.targeted)
        s = fr.score()
        verdict = "" if not target or s is None else (" (meets 90 %)" if s >= TARGET else " (BELOW the 90 % target)")
        lines.append(f"{fr.path}: {pct(s)} of {fr.count('killed', 'timeout', 'survived')} mutants killed"
                     f"{verdict}, {fr.count('equivalent')} equivalent, {fr.count('not run')} not run")
    judged = [fr for fr in results if any(fr.path.startswith(t) for t in cfg.targeted)]
    k = sum(fr.count("killed", "timeout") for fr in judged)
    n = sum(fr.count("killed", "timeout", "survived") for fr in judged)
    if n:
        lines.append(f"runtime and stream readers: {pct(k / n)} of {n} killed against the 90 % target: "
                     + ("met" if k / n >= TARGET else "NOT met"))
    return lines


def report(cfg: Config, results: list[FileResult], seconds: float) -> str:
    tools = ", ".join(f"{name} {metadata.version(name)}" for name in ("universalmutator", "cosmic-ray"))
    out = [
        "# Mutation testing",
        "",
        "Written by `make mutate` (tools/mutate.py); do not edit by hand. Known-equivalent mutants are kept in",
        f"`{cfg.equivalent}` (key, file, reason). How it works: the docstring of tools/mutate.py.",
        "",
        "Run it with `make mutate` (a sample of 45 mutants over the runtime's C files and the host's readers,",
        "seed 1, two workers, each file's first six covering test files, no mutant started after 50 minutes), or",
        "narrower: `make mutate MUTATE_FILES='sdtgen/transport/frames.py' MUTATE_SAMPLE=20 MUTATE_SEED=7 MUTATE_JOBS=1",
        "MUTATE_BUDGET=1200 MUTATE_MAX_TESTS=0` (0: every covering test file). For each survivor, write the test that",
        "kills it (against an independent truth, as every test here), or, when no test can tell it from the",
        "original, add its key with the reason to the equivalent list.",
        "",
        f"Run of {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC: seed {cfg.seed}, sample {cfg.sample}, "
        f"{cfg.jobs} worker(s), {seconds / 60:.0f} min of a {cfg.budget / 60:.0f} min budget; {tools}.",
        f"Target: {TARGET:.0%} of the mutants killed for the runtime (sdtgen/runtime) and the stream readers.",
        "",
        "| file | target | mutants made | run | killed | timeout | survived | equivalent | not run | score |"
        " tests (baseline) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for fr in results:
        target = "90 %" if any(fr.path.startswith(t) for t in cfg.targeted) else ""
        ran = fr.count("killed", "timeout", "survived", "equivalent")
        some = f" of {fr.covering}" if fr.covering > len(fr.tests) else ""
        base = f"{len(fr.tests)}{some} files, {fr.baseline}" + (f" in {fr.baseline_seconds:.0f} s"
                                                          if fr.baseline == "passed" else "")
        out.append(f"| {fr.path} | {target} | {fr.generated} | {ran} | {fr.count('killed')} | {fr.count('timeout')}"
                   f" | {fr.count('survived')} | {fr.count('equivalent')} | {fr.count('not run')} | {pct(fr.score())}"
                   f" | {base} |")
    out += ["", *[f"- {line}" for line in summary_lines(cfg, results)], ""]
    drawn_back = {fr.path: fr.rejected for fr in results if fr.rejected}
    if drawn_back:
        out.append("Drawn and put back (no mutant): " + "; ".join(
            f"{p}: " + ", ".join(f"{n} {why}" for why, n in r.items()) for p, r in drawn_back.items()) + ".")
        out.append("")

    def rows(status: str) -> list[str]:
        got = [(fr, o) for fr in results for o in fr.outcomes if o.status == status]
        return [f"| {o.mutant.path}:{o.mutant.line} | `{md(o.mutant.before)}` | `{md(shown(cfg.root, o.mutant))}` "
                f"| {o.mutant.key} |" + (f" {md(o.detail)} |" if status == "equivalent" else "") for _fr, o in got]

    survivors = rows("survived")
    out += ["## Survivors", "", "Each is a change the covering tests let through: a test to write, or, if the "
            f"change cannot be told apart, a line for `{cfg.equivalent}` with the reason.", ""]
    out += (["| where | line | mutated to | key |", "| --- | --- | --- | --- |", *survivors] if survivors
            else ["None."])
    equivalents = rows("equivalent")
    out += ["", "## Equivalent survivors", ""]
    out += (["| where | line | mutated to | key | why no test can tell |", "| --- | --- | --- | --- | --- |",
             *equivalents] if equivalents else ["None in this sample."])
    out += ["", "## The tests each file's mutants ran", "",
            "Derived by tools/mutate_map.py (what the tests import or name, plus its EXTRA table), in the order run:",
            ""]
    out += [f"- {fr.path}: " + (", ".join(fr.tests) or "none") for fr in results]
    killed = [(o.mutant, o.detail) for fr in results for o in fr.outcomes if o.status in ("killed", "timeout")]
    out += ["", "## Killed", "", "| where | mutated to | killed by |", "| --- | --- | --- |"]
    out += [f"| {m.path}:{m.line} | `{md(shown(cfg.root, m))}` | {md(d) or 'timeout'} |" for m, d in killed] \
        or ["None."]
    return "\n".join(out) + "\n"


def md(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'").replace("\n", " ⏎ ")[:160]


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # Defaults from the environment as strings: argparse converts them as it does the command line's, so a bad
    # MUTATE_SAMPLE is one line naming it, not a traceback.
    ap.add_argument("--sample", type=int, default=env.get("MUTATE_SAMPLE") or str(DEFAULT_SAMPLE),
                    help="mutants to run, split evenly over the files (MUTATE_SAMPLE; default: %(default)s)")
    ap.add_argument("--seed", type=int, default=env.get("MUTATE_SEED") or "1",
                    help="which mutants the sample draws (MUTATE_SEED; default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=env.get("MUTATE_JOBS") or "2",
                    help="mutants run at once, each in its own scratch tree (MUTATE_JOBS; default: %(default)s)")
    ap.add_argument("--budget", type=float, default=env.get("MUTATE_BUDGET") or str(DEFAULT_BUDGET),
                    help="seconds after which no mutant starts (MUTATE_BUDGET; default: %(default)s)")
    ap.add_argument("--max-tests", type=int, default=env.get("MUTATE_MAX_TESTS") or str(DEFAULT_MAX_TESTS),
                    help="run each file's first N covering test files only, 0 for all (MUTATE_MAX_TESTS; "
                         "default: %(default)s)")
    ap.add_argument("--file", action="append", default=None, help="a source file to mutate (repeatable)")
    ap.add_argument("--output", default="docs/mutation.md", help="the report (default: %(default)s)")
    ap.add_argument("--show", metavar="KEY", help="print the mutant of this key (from the report) as a diff, and end")
    args = ap.parse_args(argv)
    files = args.file or (env.get("MUTATE_FILES") or "").split() or DEFAULT_FILES
    for f in files:
        if not (ROOT / f).is_file():
            print(f"mutate: {f}: no such file in {ROOT}; name files relative to the checkout", file=sys.stderr)
            return 2
        if not f.endswith((".c", ".py")):
            print(f"mutate: {f}: no mutation tool for this kind of file; name C (.c) or Python (.py) files",
                  file=sys.stderr)
            return 2
    if args.show:
        found = [m for f in files for m in mutants_of(ROOT, f) if m.key == args.show]
        if not found:
            print(f"mutate: no mutant {args.show} in {' '.join(files)}: its line changed since the report, or "
                  "name its file with --file", file=sys.stderr)
            return 1
        print(f"{found[0].path}:{found[0].line} {found[0].rule}\n{diff(ROOT, found[0])}", end="")
        return 0
    if args.sample < 1 or args.jobs < 1 or args.max_tests < 0:
        print("mutate: --sample and --jobs must be at least 1, --max-tests at least 0", file=sys.stderr)
        return 2
    cfg = Config(ROOT, files, args.sample, args.seed, args.jobs, args.budget, max_tests=args.max_tests)
    start = time.monotonic()
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        results = run(cfg, log=lambda s: print(s, flush=True))
    except KeyboardInterrupt:
        print(f"mutate: interrupted; {args.output} not written, and the tree is as it was", file=sys.stderr)
        return 130
    text = report(cfg, results, time.monotonic() - start)
    out = ROOT / args.output
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(out)  # never a half-written report
    print("\n".join(summary_lines(cfg, results)))
    print(f"report: {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
