"""Traces of what a run recorded, in CTF 1.8, Perfetto protobuf and Chrome trace-event JSON."""

from sdtgen.trace.model import FORMATS, TraceEvent, TraceMeta, TraceProbe, write_trace

__all__ = ["FORMATS", "TraceEvent", "TraceMeta", "TraceProbe", "write_trace"]
