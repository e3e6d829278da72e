"""sdtgen's hosted platform (sdtgen/runtime/hosted/sdt_linux.c) under a user-space program of its own
(tests/runtime/hosted/program.c), built by fixtures/process/Makefile with nothing of the fixture's: threads
that come late take a CPU at their first firing, threads that exit give theirs back, strings in memory mapped
after start are read once the ranges are read again, and a breakpoint that is not a probe's reaches the
program's own handler, or kills it as SIGTRAP does."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
from helpers import ROOT, SDTGEN, run
from probe_source import called_probes

from sdtgen.event_format import event_format
from sdtgen.layout import VALUES
from sdtgen.probes import probe_key
from sdtgen.trace.model import Task
from sdtgen.trace.packets import Decoder, Event, split

HERE = Path(__file__).resolve().parent / "hosted"


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hosted")
    run(["make", "-C", str(ROOT / "fixtures" / "process"), f"O={out}", f"SDTGEN={SDTGEN}",
         f"KERNEL_SRCS={HERE / 'program.c'}", "KERNEL_CFLAGS=", "PROGRAM_SRCS=", "EXE=program"])
    return out / "program"


def decoded(trace: Path) -> list[Event]:
    """Every CPU's events, CPU by CPU, decoded by the probes the program's source declares."""
    dec = Decoder([event_format(probe_key(p.symbol), p.spec, p.args, 64) for p in called_probes(HERE)], 64)
    out = []
    for path in sorted(trace.glob("stream_*"), key=lambda p: int(p.name.split("_")[1])):
        out += [e for data in split(path.read_bytes(), dec) for e in dec.events(data)[1]]
    return out


def events(trace: Path) -> list[tuple[str, list]]:
    return [(e.probe, list(e.args)) for e in decoded(trace)]


def program_run(program: Path, tmp: Path, *args: str, check: bool = True):
    """(JSON lines, events, the process) of one run."""
    trace = tmp / "trace"
    shutil.rmtree(trace, ignore_errors=True)
    trace.mkdir()
    flags = [a for a in args if a.startswith("--")]
    proc = run([str(program), *flags, str(trace), *[a for a in args if not a.startswith("--")]], check=check)
    return [json.loads(x) for x in proc.stdout.splitlines()], events(trace), proc


def test_a_thread_started_after_start_takes_a_cpu_at_its_first_firing(program, tmp_path):
    """Its first firing is a breakpoint (trap mode): it attaches in the handler, and the strings on its own
    stack, a mapping newer than the start, are read (the ranges read again as it attached)."""
    lines, fired, _ = program_run(program, tmp_path, "late", "100")
    assert fired == [("hp:late:loop:step", [i, f"late-{i}"]) for i in range(100)]
    assert (lines[-1]["events"], lines[-1]["unattached"], lines[-1]["cpus"]) == (100, 0, 1)


def test_without_lazy_attach_a_late_threads_firings_are_counted_not_silently_lost(program, tmp_path):
    lines, fired, _ = program_run(program, tmp_path, "--no-lazy", "late", "50")
    assert fired == [] and (lines[-1]["events"], lines[-1]["unattached"]) == (0, 50)


def test_threads_that_exit_without_detaching_give_their_cpu_back(program, tmp_path):
    """100 threads, one after another, more than the 64 CPUs there are: each firing is recorded, in the CPU
    of a thread gone before it (its open packet closed first)."""
    lines, fired, _ = program_run(program, tmp_path, "churn", "100")
    assert sorted(fired) == [("hp:churn:thread:once", [k]) for k in range(100)]
    assert lines[-1]["unattached"] == 0 and lines[-1]["cpus"] <= 64


def test_a_cpu_number_past_the_hosted_bound_is_refused_and_the_last_one_taken(program, tmp_path):
    """SDT_LINUX_MAX_CPUS (sdt_runtime.h, within SDT_MAX_CPUS) sizes the platform's CPUs: asking for the CPU past
    it is refused (-1), not a slot written past the platform's array; the last one is given."""
    bound = VALUES["SDT_LINUX_MAX_CPUS"]
    assert bound <= VALUES["SDT_MAX_CPUS"]
    lines, _, _ = program_run(program, tmp_path, "bound")
    assert lines[1] == {"past": -1, "last": bound - 1}
    assert lines[-1]["cpus"] == bound  # the consumer reads up to the last slot, and no further


def test_a_thread_on_its_way_out_gives_its_cpu_back_before_its_number_is_free(program, tmp_path):
    """The main thread fires and exits: it stays a zombie, its number still a thread's, until the process
    ends. The thread that fires next takes its CPU (the zombie's open packet closed first), so nothing it
    recorded is lost; a thread pthread_join has seen end is in that state for a while too."""
    lines, fired, _ = program_run(program, tmp_path, "leader")
    assert fired == [("hp:churn:thread:once", [0]), ("hp:churn:thread:once", [1])]
    assert (lines[-1]["cpus"], lines[-1]["unattached"]) == (1, 0)


def test_strings_in_memory_mapped_after_start_are_read_once_the_ranges_are_read_again(program, tmp_path):
    """A string in a mapping newer than the last read of /proc/self/maps is recorded unreadable (never
    dereferenced); the reader that meets it reads the ranges again, as sdt_linux_refresh does, and the next
    firings copy it. NULL stays unreadable."""
    _, fired, _ = program_run(program, tmp_path, "heap")
    assert fired == [("hp:heap:str:copy", [None, 0]), ("hp:heap:str:copy", ["mapped after start", 1]),
                     ("hp:heap:str:copy", ["mapped, then refreshed", 2]), ("hp:heap:str:copy", [None, 3])]


def test_a_breakpoint_not_a_probes_goes_to_the_programs_handler_or_kills_it(program, tmp_path):
    lines, _, _ = program_run(program, tmp_path, "int3")
    assert {"their_handler": 1} in lines
    _, _, proc = program_run(program, tmp_path, "int3-default", check=False)
    assert proc.returncode == -signal.SIGTRAP


def test_a_forked_child_keeps_its_text_as_it_was_when_the_parent_patches_its_own(program, tmp_path):
    """The text is a shared memfd mapping: a child forked before the parent arms a probe copies it into one of
    its own, so the parent's branch to the recorder never reaches the child's code (where it would record into
    the child's copy of the rings, unknown to its runtime)."""
    lines, fired, _ = program_run(program, tmp_path, "fork")
    assert {"child": 0} in lines
    assert fired == [("hp:churn:thread:once", [8])]


def test_each_firing_carries_the_thread_that_fired_it(program, tmp_path):
    """Task context (docs/runtime.md): 12 threads one after another, so several share a CPU (and packet), each
    named by pthread_setname_np; every event's task is the id gettid gave that thread and the name
    pthread_getname_np read back, as the thread itself printed them, context `task`; half way each renames itself
    and says so (sdt_linux_task_renamed), and its later events carry the new name."""
    n, rounds = 12, 300
    lines, _, _ = program_run(program, tmp_path, "tasks", str(n), str(rounds))
    said = {x["k"]: Task(x["tid"], "task", x["name"]) for x in lines if "tid" in x}
    renamed = {x["k"]: (x["from"], x["name"]) for x in lines if "from" in x}
    assert sorted(said) == sorted(renamed) == list(range(n)) and len({t.id for t in said.values()}) == n

    def task(k: int, i: int) -> Task:
        start, name = renamed[k]
        return Task(said[k].id, "task", name) if i >= start else said[k]

    fired = decoded(tmp_path / "trace")
    assert sorted(e.args for e in fired) == [(k, i) for k in range(n) for i in range(rounds)]
    assert [e for e in fired if e.task != task(*e.args)] == []
    assert len({e.cpu for e in fired}) < n  # tasks shared CPUs: the writer said each anew where it changed
