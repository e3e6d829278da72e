"""write_trace: one entry point for the three formats; a caller's bad event is a ValueError, nothing written."""

from __future__ import annotations

import pytest

from sdtgen.trace import FORMATS, TraceEvent, TraceMeta, TraceProbe, write_trace

PROBE = TraceProbe(3, "tt", "m", "f", "n", ("int", "const char *"))
META = TraceMeta("x86_64", "tsc", 1000, 2, (PROBE,), {})


def test_an_unknown_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown trace format 'pcap'"):
        write_trace(tmp_path / "t", "pcap", META, [])  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("event", [
    TraceEvent(9, 0, 1, (1, "a")),  # no such probe
    TraceEvent(3, 0, 1, (1,)),  # an argument short
    TraceEvent(3, 0, 1, ("a", 1)),  # a string where an int goes, and an int for a string
    TraceEvent(3, 2, 1, (1, "a")),  # a CPU the trace does not have
])
def test_a_bad_event_is_a_value_error_and_nothing_is_written(tmp_path, fmt, event):
    with pytest.raises(ValueError):
        write_trace(tmp_path / "t", fmt, META, [event])
    assert list(tmp_path.iterdir()) == []
