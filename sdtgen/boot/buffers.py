"""Per-CPU ring buffers in guest memory, and the host's drain of them.

The host maps one area: per-CPU control structures (``struct sdt_cpu`` of the
generated recorders, 1 KiB apart: the rest is scratch a dropped record is
written to), then each CPU's ring of 64-byte slots. It points each CPU's per-CPU register at that CPU's control
structure, and reads the rings only while the guest is stopped: records
between tail and head, oldest first, after which the tail moves to the head.
The layout is in docs/boot.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from sdtgen.boot.limits import MAX_BUFFER, MIN_BUFFER
from sdtgen.errors import SdtError
from sdtgen.recorder import CONTROL, SLOT, STRING_SLOTS

CTL = struct.Struct("<10Q")  # self, base, slots, head, tail, lost, policy, cpu, ranges, nranges
RANGE = struct.Struct("<2Q")  # start, size: memory a recorder may copy a string from
RECORD = struct.Struct("<QIHH6Q")  # ts, key, n, nulls, a[6]
POLICIES = {"drop": 0, "overwrite": 1}
FULL = 2  # the policy word of a drop-mode ring that dropped: the writer drops until the host reads it
PAGE = 0x1000


def check_buffer_size(size: int) -> int:
    """BYTES per CPU: a power of two from MIN_BUFFER to MAX_BUFFER."""
    if not MIN_BUFFER <= size <= MAX_BUFFER or size & (size - 1):
        raise SdtError("", f"--buffer-size {size} is not a power of two from {MIN_BUFFER} to {MAX_BUFFER}",
                       "give e.g. 65536 or 1048576 (bytes per CPU)")
    return size


@dataclass(frozen=True)
class Format:
    """How to decode one probe's records: its key, name and argument types."""

    key: int
    spec: str
    types: tuple[str, ...]
    ints: tuple[int, ...]  # arguments declared int: signed 32-bit
    strings: tuple[int, ...]  # arguments copied as strings, in slot order
    mask: int  # a register word of the guest

    @property
    def plain(self) -> bool:
        """Every argument is the register word as it is (the batch path)."""
        return not self.ints and not self.strings and self.mask == MASK64


def make_format(key: int, spec: str, types: tuple[str, ...], bits: int) -> Format:
    from sdtgen.recorder import is_string

    ints = tuple(k for k, t in enumerate(types) if t.replace(" ", "") in ("int", "signedint", "signed"))
    return Format(key, spec, types, ints, tuple(k for k, t in enumerate(types) if is_string(t)), (1 << bits) - 1)


class Event(NamedTuple):
    """One recorded firing: what a trace event is made of (probe, CPU, timestamp, arguments)."""

    ts: int
    cpu: int
    probe: str
    args: tuple[int | str | None, ...]


def decode(cpu: int, data: bytes, formats: dict[int, Format]) -> list[Event]:
    """The records of one CPU's ring, read out in order (``data``: whole slots from tail to head).

    Fixed 64-byte slots unpack in one batch; a record whose arguments are plain register words
    is a slice of its slot. Padding (key 0) and records of unknown keys are skipped by their length.
    """
    out: list[Event] = []
    append = out.append
    fast = {k: (f.spec, 4 + len(f.types)) for k, f in formats.items() if f.plain}
    new = tuple.__new__
    nxt = 0
    for i, slot in enumerate(RECORD.iter_unpack(data)):
        if i < nxt:
            continue  # a string slot of the record before
        nxt = i + (slot[2] or 1)
        plain = fast.get(slot[1])
        if plain is not None:
            append(new(Event, (slot[0], cpu, plain[0], slot[4:plain[1]])))
            continue
        f = formats.get(slot[1])
        if f is not None:
            append(new(Event, (slot[0], cpu, f.spec, _args(f, slot, i, data))))
    return out


def _args(f: Format, slot: tuple, i: int, data: bytes) -> tuple:
    """Arguments that need more than a slice: 32-bit words, signed ints, copied strings."""
    args: list = [w & f.mask for w in slot[4:4 + len(f.types)]]
    for k in f.ints:
        v = args[k] & 0xFFFFFFFF
        args[k] = v - (1 << 32) if v & 0x80000000 else v
    nulls = slot[3]
    for j, k in enumerate(f.strings):
        at = (i + 1 + STRING_SLOTS * j) * SLOT
        text = data[at:at + STRING_SLOTS * SLOT]
        end = text.find(b"\0")
        args[k] = None if nulls >> k & 1 or end < 0 else text[:end].decode("utf-8", "replace")
    return tuple(args)


MASK64 = (1 << 64) - 1


def readable_ranges(machine, extra: int = 0) -> list[tuple[int, int]]:
    """(start, size) of the guest memory a recorder may read strings from, adjacent regions joined;
    with ``extra``, room for that many more (what is about to be mapped)."""
    out: list[list[int]] = []
    for r in sorted(machine.regions, key=lambda r: r.vaddr):
        if out and out[-1][0] + out[-1][1] == r.vaddr:
            out[-1][1] += r.size
        else:
            out.append([r.vaddr, r.size])
    return [(start, size) for start, size in out] + [(0, 0)] * extra


class Rings:
    """The rings of ``cpus`` CPUs, ``size`` bytes each, in one guest area mapped at ``base``."""

    def __init__(self, machine, size: int, policy: str, cpus: int = 1) -> None:
        self.machine = machine
        self.size = check_buffer_size(size)
        self.slots = size // SLOT
        self.policy = policy
        self.cpus = cpus
        ranges = readable_ranges(machine, extra=1)  # the area this maps is readable too
        self.table = cpus * CONTROL  # the readable ranges, after the control structures
        self.controls = (self.table + RANGE.size * len(ranges) + PAGE - 1) & ~(PAGE - 1)
        area = (self.controls + cpus * size + PAGE - 1) & ~(PAGE - 1)  # Unicorn maps whole pages
        self.base = (machine.stack_top - machine.stack_size - PAGE - area) & ~(PAGE - 1)
        machine.map_area(self.base, area, "the trace buffers")
        self.lost = [0] * cpus
        table = readable_ranges(machine)
        machine.write(self.base + self.table, b"".join(RANGE.pack(start, size) for start, size in table))
        for cpu in range(cpus):
            ctl = self.control(cpu)
            machine.write(ctl, CTL.pack(ctl, self.ring(cpu), self.slots, 0, 0, 0, POLICIES[policy], cpu,
                                        self.base + self.table, len(table)))
        machine.arch.set_cpu_pointer(machine.uc, self.control(0))  # the boot CPU; the others are pointed by Smp

    def control(self, cpu: int) -> int:
        return self.base + cpu * CONTROL

    def ring(self, cpu: int) -> int:
        return self.base + self.controls + cpu * self.size

    def drain(self, only: int | None = None) -> list[tuple[int, bytes]]:
        """(cpu, its records since the last drain as whole slots, oldest first); the lost counts updated.
        ``only``: that CPU's ring alone."""
        out = []
        for cpu in range(self.cpus) if only is None else (only,):
            ctl = self.control(cpu)
            _, _, _, head, tail, lost, policy, *_ = CTL.unpack(self.machine.read(ctl, CTL.size))
            self.lost[cpu] = lost
            if not 0 <= head - tail <= self.slots:
                raise SdtError("", f"the trace buffer of CPU {cpu} is corrupt (head {head}, tail {tail})",
                               "the guest wrote over sdtgen's control structure")
            if head != tail:
                out.append((cpu, self._linear(cpu, head, tail)))
                self.machine.write(ctl + 32, struct.pack("<Q", head))  # the tail: read up to the head
            if policy == FULL:
                self.machine.write(ctl + 48, struct.pack("<Q", POLICIES["drop"]))  # room again
        return out

    def _linear(self, cpu: int, head: int, tail: int) -> bytes:
        """The slots from tail to head, unwrapped."""
        start, count = tail % self.slots, head - tail
        ring = self.ring(cpu)
        first = min(count, self.slots - start)
        data = self.machine.read(ring + start * SLOT, first * SLOT)
        return data + self.machine.read(ring, (count - first) * SLOT) if count > first else data
