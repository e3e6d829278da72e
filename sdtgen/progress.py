"""A progress line on standard error while long work runs: on a terminal only, quiet otherwise (a pipe, a file,
a test), as make and apt do. The line is rewritten in place a few times a second and erased when the work ends,
so what the command prints afterwards is all that stays."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

INTERVAL = 0.25  # seconds between two updates: often enough to look alive, rarely enough to cost nothing
ERASE = "\r\033[K"  # back to the line's start, and clear it


@contextmanager
def progress_line(status: Callable[[float], str], stream: TextIO | None = None,
                  interval: float = INTERVAL) -> Iterator[None]:
    """While the block runs, ``status(seconds since it began)`` on ``stream`` (standard error), on one line
    rewritten every ``interval`` from a thread of its own, when ``stream`` is a terminal; nothing otherwise.
    ``status`` reads what the work updates (a count it increments): it must not block or raise."""
    out = sys.stderr if stream is None else stream
    if not _is_terminal(out):
        yield
        return
    began = time.monotonic()
    stop = threading.Event()
    width = 0

    def show() -> None:
        nonlocal width
        text = status(time.monotonic() - began)[:max(1, _columns() - 1)]  # never wrap: \r rewrites one line
        out.write("\r" + text + " " * max(0, width - len(text)))
        out.flush()
        width = len(text)

    def tick() -> None:
        while True:
            try:
                show()
            except (OSError, ValueError):  # the terminal went away: the work goes on without its line
                return
            if stop.wait(interval):
                return

    ticker = threading.Thread(target=tick, name="sdtgen-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
        try:
            out.write(ERASE)
            out.flush()
        except (OSError, ValueError):
            pass


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size((80, 24)).columns


def seconds(elapsed: float) -> str:
    """Elapsed time as a progress line shows it: 7 s, 2 min 05 s."""
    s = int(elapsed)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"
