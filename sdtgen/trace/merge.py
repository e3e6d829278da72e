"""Merge per-CPU event streams into one in timestamp order, as LTT's user-space merge does."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sdtgen.trace.model import TraceEvent


def merge_cpus(streams: Mapping[int, Iterable[TraceEvent]]) -> list[TraceEvent]:
    """Every event of every CPU's stream, by timestamp; ties by CPU, then by position in its stream.

    The sort is stable and each stream is usually sorted already, so this costs about one pass per stream.
    """
    keyed = [(e.ts, cpu, seq, e) for cpu, events in streams.items() for seq, e in enumerate(events)]
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    return [k[3] for k in keyed]
