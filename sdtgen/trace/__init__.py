"""Traces of what a run recorded: CTF 1.8 (the runtime's packets as they stand), Perfetto and Chrome JSON."""

from sdtgen.trace.model import FORMATS, TraceMeta, TraceProbe

__all__ = ["FORMATS", "TraceMeta", "TraceProbe"]
