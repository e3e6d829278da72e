"""The stack a control command needs (docs/control.md, "The context a command runs in"): GCC's call graph of
the runtime built with each architecture's kernel flags (tools/stack_usage.py) bounds the deepest chain of
calls from sdt_control_input by the number the document states."""

from __future__ import annotations

import re

import pytest
from helpers import ROOT, cross_tool
from stack_usage import measure

from sdtgen import arch as arches


def documented_bound() -> int:
    text = (ROOT / "docs" / "control.md").read_text()
    (bound,) = re.findall(r"a command needs at most \*\*([\d,]+) bytes\*\* of stack", text)
    return int(bound.replace(",", ""))


@pytest.mark.parametrize("arch", arches.names())
def test_the_deepest_command_fits_the_stack_the_document_states(arch, tmp_path):
    if arch != "x86_64":
        cross_tool(arch, "gcc")
    usage = measure(arch, tmp_path)
    assert usage.path[:3] == ("sdt_control_input", "sdt_control_input_on", "sdt_control_line"), usage
    assert 0 < usage.bytes <= documented_bound(), (
        f"{arch}: {usage.bytes} bytes through {' -> '.join(usage.path)}: more than docs/control.md states")
