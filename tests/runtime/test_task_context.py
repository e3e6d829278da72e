"""Task context in the writer (docs/runtime.md), driven as a kernel's scheduler would (tests/runtime/task_switch.c,
built with sdt_transport.c for this machine): the current task changes between firings on one CPU, and every
event decodes with the task the script had set when it fired, each packet alone (the first event of every
packet says its task), the hook asked only at a packet's start and after the scheduler said it switched
(sdt_task_switch), its name only where a task event was written; a kernel without the hook records no task,
which is said as none, not task 0. The truth is the script, not the runtime."""

from __future__ import annotations

import random
import subprocess

import pytest
from helpers import need_tool, run
from runtime_support import HERE, include_dir, runtime_dir

from sdtgen.event_format import event_format
from sdtgen.layout import EVENT, PACKET, VALUES
from sdtgen.trace.model import CONTEXTS, Task
from sdtgen.trace.packets import Decoder

SIZE = 1024  # task_switch.c's packets
TASK_KEY = VALUES["SDT_TASK_KEY"]


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    out = tmp_path_factory.mktemp("tasks") / "task_switch"
    rt = runtime_dir()
    run([need_tool("gcc", "gcc"), "-O2", "-Wall", "-Wextra", "-Werror", "-ffreestanding", f"-I{include_dir()}",
         f"-I{rt}", "-o", str(out), str(HERE / "task_switch.c"), str(rt / "sdt_transport.c")])
    return out


def script(seed: int, firings: int) -> tuple[list[str], list[Task | None]]:
    """Words for task_switch.c, and the task each firing ran for: a few tasks, interrupts on top of them, the
    kernel's own context, a task with no name and one with a name longer than the runtime copies."""
    rnd = random.Random(seed)
    tasks = [Task(42, "task", "shell"), Task(7, "task", "worker-7"), Task(0, "interrupt", None),
             Task(1, "kernel", "idle"), Task(99, "task", None), Task(2**40 + 3, "task", "n" * 200)]
    value = {name: v for v, name in CONTEXTS.items()}
    words, fired, now = [], [], None
    for _ in range(firings):
        if now is None or rnd.random() < 0.2:
            now = rnd.choice(tasks)
            words.append(f"t:{now.id}:{value[now.context]}:{now.name or '-'}")
        words.append("e")
        fired.append(Task(now.id, now.context, now.name[:VALUES["SDT_MAX_STRING"]] if now.name else None))
    return words, fired


def recorded(program, words: list[str], *flags: str) -> tuple[list[bytes], int, int]:
    packets, discarded, names, _ = asked(program, words, *flags)
    return packets, discarded, names


def asked(program, words: list[str], *flags: str) -> tuple[list[bytes], int, int, tuple[int, int]]:
    """The packets, events discarded, names asked, and (times the hook was asked, switches the script said)."""
    proc = subprocess.run([str(program), *flags, *words], capture_output=True, check=True, timeout=60)
    discarded, names, hook, switches = map(int, proc.stderr.split())
    return ([proc.stdout[at:at + SIZE] for at in range(0, len(proc.stdout), SIZE)], discarded, names,
            (hook, switches))


def decoder() -> Decoder:
    return Decoder([event_format(1, "t:t:t:e", ("long",), 64)], 64)


def first_keys(packets: list[bytes]) -> list[int]:
    head, event = PACKET.size(64), EVENT.struct(64)
    return [event.unpack_from(p, head)[1] for p in packets]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_event_carries_the_task_it_fired_in_and_each_packet_decodes_alone(program, seed):
    words, fired = script(seed, 3000)
    packets, discarded, names = recorded(program, words)
    assert discarded == 0 and len(packets) > 10
    events = [e for p in packets for e in decoder().events(p)[1]]  # a decoder of its own for each packet
    assert [e.args[0] for e in events] == list(range(len(fired)))
    wrong = [(k, e.task, fired[k]) for k, e in enumerate(events) if e.task != fired[k]]
    assert not wrong, f"{len(wrong)} events of the wrong task, the first: {wrong[0]}"
    assert set(first_keys(packets)) == {TASK_KEY}  # every packet says its task before its first firing
    said = sum(1 for p in packets for e in _raw(p) if e == TASK_KEY)
    switches = sum(1 for w in words if w.startswith("t:"))
    assert names == said <= switches + len(packets)  # the name asked only for a task event, one each switch


def test_the_hook_is_asked_at_a_packets_start_and_after_a_switch_never_at_every_event(program):
    """The writer's fast path reads no hook: a kernel's task costs a call only where the task may have changed."""
    words = [w for k in range(60) for w in (f"t:{k % 3 + 1}:2:task-{k % 3}", *["e"] * 50)]
    packets, _, names, (hook, switches) = asked(program, words)
    assert switches == 60 and len(words) > 10 * (len(packets) + switches)  # asking at every event would show
    assert hook <= len(packets) + switches + names  # a name is asked with the task, once more


def _raw(packet: bytes) -> list[int]:
    """The keys of a packet's events, walked by their sizes."""
    head, event = PACKET.struct(64), EVENT.struct(64)
    content = head.unpack_from(packet)[PACKET.names().index("content_size")] // 8
    at, keys = PACKET.size(64), []
    while at < content:
        _, key, size, _ = event.unpack_from(packet, at)
        keys.append(key)
        at = (at + size + 7) & ~7
    return keys


def test_without_the_hook_events_carry_no_task_not_task_0(program):
    words, fired = script(4, 500)
    packets, discarded, names = recorded(program, words, "--no-hook")
    events = [e for p in packets for e in decoder().events(p)[1]]
    assert len(events) == len(fired) and discarded == names == 0
    assert {e.task for e in events} == {None}
    assert TASK_KEY not in {k for p in packets for k in _raw(p)}
