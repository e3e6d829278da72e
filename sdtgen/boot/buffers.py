"""Per-CPU ring buffers in guest memory, and the host's drain of them.

The host maps one area: a page of per-CPU control structures (64 bytes each,
``struct sdt_cpu`` of the generated recorders), then each CPU's ring of
64-byte slots. It points each CPU's per-CPU register at that CPU's control
structure, and reads the rings only while the guest is stopped: records
between tail and head, oldest first, after which the tail moves to the head.
The layout is in docs/boot.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sdtgen.boot.limits import MAX_BUFFER, MIN_BUFFER
from sdtgen.errors import SdtError
from sdtgen.recorder import SLOT, STRING_SLOTS

CTL = struct.Struct("<8Q")  # self, base, slots, head, tail, lost, policy, cpu
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


def make_format(key: int, spec: str, types: tuple[str, ...], bits: int) -> Format:
    from sdtgen.recorder import is_string

    ints = tuple(k for k, t in enumerate(types) if t.replace(" ", "") in ("int", "signedint", "signed"))
    return Format(key, spec, types, ints, tuple(k for k, t in enumerate(types) if is_string(t)), (1 << bits) - 1)


@dataclass(frozen=True, slots=True)
class Event:
    """One recorded firing: what a trace event is made of (probe, CPU, timestamp, arguments)."""

    ts: int
    cpu: int
    probe: str
    args: tuple[int | str | None, ...]


def decode(cpu: int, data: bytes, formats: dict[int, Format]) -> list[Event]:
    """The records of one CPU's ring, read out in order (``data``: whole slots from tail to head).

    Fixed 64-byte slots unpack in one batch; a record of an unknown key is skipped by its length.
    """
    out: list[Event] = []
    append = out.append
    slots = list(RECORD.iter_unpack(data))
    i, count = 0, len(slots)
    while i < count:
        ts, key, n, nulls, *words = slots[i]
        f = formats.get(key)
        i += n or 1
        if f is None:
            continue  # padding at the ring's end (key 0)
        args: list = words[:len(f.types)]
        if f.mask != MASK64:
            args = [w & f.mask for w in args]
        for k in f.ints:
            v = args[k] & 0xFFFFFFFF
            args[k] = v - (1 << 32) if v & 0x80000000 else v
        for j, k in enumerate(f.strings):
            if nulls >> k & 1:
                args[k] = None
                continue
            at = (i - n + 1 + STRING_SLOTS * j) * SLOT
            text = data[at:at + STRING_SLOTS * SLOT]
            args[k] = text[:text.find(b"\0")].decode("utf-8", "replace") if b"\0" in text else None
        append(Event(ts, cpu, f.spec, tuple(args)))
    return out


MASK64 = (1 << 64) - 1


class Rings:
    """The rings of ``cpus`` CPUs, ``size`` bytes each, in one guest area mapped at ``base``."""

    def __init__(self, machine, size: int, policy: str, cpus: int = 1) -> None:
        self.machine = machine
        self.size = check_buffer_size(size)
        self.slots = size // SLOT
        self.policy = policy
        self.cpus = cpus
        area = (PAGE + cpus * size + PAGE - 1) & ~(PAGE - 1)
        self.base = (machine.stack_top - machine.stack_size - PAGE - area) & ~(PAGE - 1)
        machine.map_area(self.base, area, "the trace buffers")
        self.lost = [0] * cpus
        for cpu in range(cpus):
            ctl = self.control(cpu)
            machine.write(ctl, CTL.pack(ctl, self.ring(cpu), self.slots, 0, 0, 0, POLICIES[policy], cpu))
        machine.arch.set_cpu_pointer(machine.uc, self.control(0))  # one CPU today: this engine is CPU 0

    def control(self, cpu: int) -> int:
        return self.base + cpu * CTL.size

    def ring(self, cpu: int) -> int:
        return self.base + PAGE + cpu * self.size

    def drain(self) -> list[tuple[int, bytes]]:
        """(cpu, its records since the last drain as whole slots, oldest first); the lost counts updated."""
        out = []
        for cpu in range(self.cpus):
            ctl = self.control(cpu)
            _, _, _, head, tail, lost, policy, _ = CTL.unpack(self.machine.read(ctl, CTL.size))
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
