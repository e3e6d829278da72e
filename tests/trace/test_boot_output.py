"""boot's own outputs read arguments as the traces do: the text lines, --json and the console show every
declared C type as C converts the value (a long of -1 is -1, an unsigned long of -1 is 2**64 - 1, a
pointer is unsigned, in hex on a line), checked against tracing.expected, the tests' own reading of C."""

from __future__ import annotations

import json
import re

import pytest
from helpers import sdtgen
from tracing import TYPES, WIDE, calls, expected, fired_values

POINTER = WIDE.index("void *")


def run_boot(image, *extra: str) -> list[str]:
    proc = sdtgen("boot", image, "--enable", ":::", *calls(), *extra)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def wanted() -> list[tuple[str, list]]:
    return [(p, expected(p, v)) for p, v in fired_values()]


def test_json_fire_events_hold_each_argument_as_its_c_type(trace_kernel):
    events = [json.loads(x) for x in run_boot(trace_kernel, "--json")]
    assert [(e["probe"], e["args"]) for e in events if e["event"] == "fire"] == wanted()


@pytest.mark.parametrize("via", ["lines", "console"])
def test_text_lines_and_the_console_show_each_argument_as_its_c_type(trace_kernel, via, tmp_path):
    if via == "lines":
        out = run_boot(trace_kernel)
    else:  # the same runs typed at the console, one command a line
        script = tmp_path / "runs"
        argv, lines = calls(), []
        for i, word in enumerate(argv):
            if word == "--run":
                lines.append(f"run {argv[i + 1]}")
            elif word == "--arg":
                lines[-1] += f" {argv[i + 1]}"
        script.write_text("\n".join(lines) + "\n")
        proc = sdtgen("boot", trace_kernel, "--enable", ":::", "--script", str(script))
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout.splitlines()
    fired = [ln for ln in out if ln.startswith("tt:")]
    want = []
    for probe, values in wanted():
        shown = []
        for i, (ctype, v) in enumerate(zip(TYPES[probe], values, strict=True)):
            if isinstance(v, str):
                shown.append(f"arg{i}={json.dumps(v)}")
            elif v is None:
                shown.append(f"arg{i}=<unreadable>")
            else:
                shown.append(f"arg{i}={v:#x}" if ctype == WIDE[POINTER] else f"arg{i}={v}")
        want.append(f"{probe}  {' '.join(shown)}")
    assert fired == want
    assert any(re.search(r"arg2=-9223372036854775808 .*arg4=-2 ", ln) for ln in fired)  # long and int64_t signed
