"""How many CPUs a QEMU kernel has is the kernel's to say: sdtgen gives QEMU the vCPUs asked for (up to the
protocol's SDT_MAX_CPUS, sdtgen/layout.py) and goes by the hello, which says how many the kernel took (the fixture's
platform takes at most its MAX_CPUS, fixtures/qemu/platform.h, and parks the vCPUs past it); more is said, not
hidden."""

from __future__ import annotations

import json
import re

from helpers import ROOT, sdtgen

from sdtgen.layout import VALUES


def platform_cpus() -> int:
    """The fixture platform's own bound, as its C header states it."""
    text = (ROOT / "fixtures" / "qemu" / "platform.h").read_text()
    return int(re.search(r"#define MAX_CPUS (\d+)", text)[1])


def test_vcpus_past_what_the_kernel_takes_run_on_the_cpus_its_hello_says(qemu_kernel):
    image = qemu_kernel("x86_64")
    took = platform_cpus()
    r = sdtgen("qemu", image, "--cpus", took + 1, "--json", "--enable", "hk:::", "--run", "kmain", "--arg", "1")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert {"event": "warning", "text": f"the kernel says it has {took} CPUs, QEMU was given {took + 1}"} in events
    returns = [e for e in events if e["event"] == "return"]
    assert sorted(e["cpu"] for e in returns) == list(range(took))  # every CPU the kernel took ran kmain, no other


def test_more_cpus_than_a_kernel_may_have_is_one_line_before_qemu_starts(qemu_kernel):
    image = qemu_kernel("x86_64")
    bound = VALUES["SDT_MAX_CPUS"]
    r = sdtgen("qemu", image, "--cpus", bound + 1, "--run", "kmain", "--arg", "1")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"sdtgen: error: --cpus {bound + 1} is not a number of CPUs from 1 to {bound}"]
