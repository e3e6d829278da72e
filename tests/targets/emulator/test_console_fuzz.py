"""Random console lines never end the console with anything but one diagnostic line."""

from __future__ import annotations

import contextlib
import io
import random

from sdtgen.errors import SdtError
from sdtgen.session.console import Console

WORDS = ["list", "enable", "disable", "run", "action", "stats", "help", "hk:::", "a:b:c:d:e", "kmain", "kmain:str",
         "sched_run", "0x10", "-1", str(1 << 70), '"', "'", "\\", ":", "*", "\x1b", "\0", "é", "=", "#"]


def test_random_lines_give_a_result_or_one_error(booted):
    rng = random.Random(11)
    console = Console(booted.session, stdin=io.StringIO())
    for _ in range(400):
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
        if line.split()[0] == "run" and len(line.split()) > 1 and line.split()[1] not in ("kmain", "sched_run"):
            continue  # only run what returns at once
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert console.onecmd(line) is False  # never quits, never raises
        for text in err.getvalue().splitlines():
            assert text.startswith(("sdtgen: error: ", f"{booted.session.image.path}: error: ")), (line, text)
    strict = Console(booted.session, strict=True, stdin=io.StringIO())
    for _ in range(200):
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
        if line.split()[0] == "run":
            continue
        try:
            strict.onecmd(line)
        except SdtError as e:
            assert "\n" not in str(e)
