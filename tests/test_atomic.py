"""Outputs written over time (sdtgen.atomic.Staged, what every trace writer stages its file or directory in): a
signal that arrives while the temporary file is made, held until it is, leaves nothing behind when it raises."""

from __future__ import annotations

import signal
import tempfile
import threading

import pytest

from sdtgen.atomic import Staged


class Signalled(Exception):
    pass


@pytest.mark.parametrize("directory", [False, True], ids=["file", "directory"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_while_the_temporary_output_is_made_leaves_nothing(tmp_path, monkeypatch, directory, signum):
    def raised(sig, frame):
        raise Signalled(sig)

    make = tempfile.mkdtemp if directory else tempfile.mkstemp

    def make_then_signal(*args, **kwargs):
        made = make(*args, **kwargs)
        signal.pthread_kill(threading.get_ident(), signum)  # held while the output is made: it arrives as the
        # constructor ends (to this thread: a test runner's other threads do not hold it, sdtgen has none)
        return made

    monkeypatch.setattr(tempfile, make.__name__, make_then_signal)
    old = signal.signal(signum, raised)
    try:
        with pytest.raises(Signalled):
            Staged(tmp_path / "trace", "trace", directory=directory)
    finally:
        signal.signal(signum, old)
    assert list(tmp_path.iterdir()) == []
