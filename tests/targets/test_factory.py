"""sdtgen.targets.open_target: one factory for every kind of target, with one set of defaults (what the command
line, the tests, the bench and `cost` build alike)."""

from __future__ import annotations

import pytest

from sdtgen.errors import SdtError
from sdtgen.limits import DEFAULT_BUFFER, DEFAULT_TIMEOUT
from sdtgen.targets import KINDS, SHARED, target_options


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_takes_the_same_defaults_for_what_it_shares(kind):
    """A ring of DEFAULT_BUFFER bytes a CPU, overflow drop, DEFAULT_TIMEOUT to answer, one CPU: the same for every
    kind that takes them (no kind has a default of its own for a shared option)."""
    chosen = target_options(kind)
    shared = {"buffer_size": DEFAULT_BUFFER, "overflow": "drop", "timeout": DEFAULT_TIMEOUT, "cpus": 1}
    assert {k: chosen[k] for k in SHARED[kind]} == {k: shared[k] for k in SHARED[kind]}
    assert target_options(kind, buffer_size=None, timeout=None) == chosen  # None: the default


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_accepts_the_shared_options_and_refuses_what_none_takes(kind):
    """The shared options may be given to any kind (those it does without are left out); anything else is a
    caller's mistake."""
    assert target_options(kind, buffer_size=4096, overflow="drop", timeout=5.0, cpus=2) == {
        **target_options(kind), **{k: v for k, v in {"buffer_size": 4096, "timeout": 5.0, "cpus": 2}.items()
                                    if k in SHARED[kind]}}
    with pytest.raises(TypeError):
        target_options(kind, bogus=1)


@pytest.mark.parametrize(("options", "said"), [({"buffer_size": 3000}, "--buffer-size 3000 is not a power of two"),
                                               ({"buffer_size": 1024}, "--buffer-size 1024"),
                                               ({"overflow": "ring"}, "unknown overflow policy 'ring'")])
def test_a_bad_option_is_one_line_before_anything_starts(options, said):
    for kind in ("emulator", "qemu", "attach", "process"):
        with pytest.raises(SdtError, match=said):
            target_options(kind, **options)
