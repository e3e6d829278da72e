"""The trace tests' kernel (tracing.py has the rest of what they share)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import build_c_kernel
from tracing import SOURCE


@pytest.fixture(scope="session")
def trace_kernel(tmp_path_factory) -> Path:
    return build_c_kernel(tmp_path_factory.mktemp("tt"), "x86_64", SOURCE, "tt")
