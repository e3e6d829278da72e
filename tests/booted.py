"""A boot session on a real image whose JSON events the test reads."""

from __future__ import annotations

import io
import json

from native_oracle import PROTOTYPES, Call

from sdtgen.session.reporter import Reporter
from sdtgen.session.starts import open_session


class Booted:
    """A session on the emulated boot whose JSON events are kept for the test to read."""

    def __init__(self, image, **options) -> None:
        """``options``: the emulator target's (sdtgen.targets.OWN and DEFAULTS), the factory's defaults for the rest."""
        self.buffer = io.StringIO()
        self.session = open_session("emulator", str(image), Reporter(as_json=True, out=self.buffer), **options)

    def events(self) -> list[dict]:
        out = [json.loads(line) for line in self.buffer.getvalue().splitlines()]
        self.buffer.seek(0)
        self.buffer.truncate()
        return out

    def run(self, calls: list[Call]) -> list[dict]:
        for c in calls:
            ret = PROTOTYPES[c.function][0] if c.function in PROTOTYPES else "long"
            self.session.run(f"{c.function}:{ret}", list(c.args))
        return self.events()
