"""Several CPUs' events in one time order, as far as every CPU has been read.

Each CPU's events come in its own order, a packet at a time; an event can be given out once every CPU
seen so far has been read past its time (a packet says up to when: its end), since nothing earlier can
come from them any more. Ties go by CPU. At most ``limit`` events wait: past that, a CPU that has not
sent a packet for long (an idle one) holds back no more, and what the others read is given out anyway.
"""

from __future__ import annotations

import bisect
import heapq
from typing import Protocol, TypeVar


class Timed(Protocol):
    ts: int
    cpu: int


T = TypeVar("T", bound=Timed)


def _ts(item: Timed) -> int:
    return item.ts


def _key(item: Timed) -> tuple[int, int]:
    return item.ts, item.cpu


class TimeOrder:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pending: dict[int, list] = {}
        self._read_to: dict[int, int] = {}  # CPU -> the time up to which its packets have been read
        self.held = 0

    def add(self, cpu: int, items: list[T], read_to: int) -> list[T]:
        """``cpu``'s next items, its packets read up to ``read_to``; the items that can be given out now."""
        self._read_to[cpu] = max(self._read_to.get(cpu, read_to), read_to)
        self._pending.setdefault(cpu, []).extend(items)
        self.held += len(items)
        out = self._upto(min(self._read_to.values()))
        if self.held > self.limit:  # what the CPUs with events waiting have been read to, ahead of the idle ones
            out += self._upto(min(self._read_to[c] for c, waiting in self._pending.items() if waiting))
        return out

    def expect(self, cpus) -> None:
        """``cpus`` are about to record (a run starts on them): one not read yet holds the others back from
        now on, as one already read does (without it, a CPU's first packet could come after later events
        of the others were given out)."""
        floor = min(self._read_to.values(), default=-1)
        for cpu in cpus:
            self._read_to.setdefault(cpu, floor)

    def rest(self) -> list[T]:
        """Every item still waiting, in order (the end of the stream)."""
        return self._upto(None)

    def _upto(self, upto: int | None) -> list:
        ready = []
        for items in self._pending.values():
            n = len(items) if upto is None else bisect.bisect_right(items, upto, key=_ts)
            if n:
                ready.append(items[:n])
                del items[:n]
        self.held -= sum(map(len, ready))
        return list(heapq.merge(*ready, key=_key)) if len(ready) > 1 else ready[0] if ready else []
