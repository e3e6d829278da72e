"""The real-world comparisons reuse the test suite's helpers and its readelf/objdump parsers."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "tables")]
