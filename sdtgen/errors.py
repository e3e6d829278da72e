"""The one exception type users see: a message the CLI prints as a single line."""


class SdtError(Exception):
    """Bad input or a failed step. ``str()`` is the whole user-facing line."""

    def __init__(self, where: str, what: str, fix: str = "") -> None:
        self.where = where
        self.what = what
        self.fix = fix
        line = f"{where}: {what}" if where else what
        if fix:
            line += f"; {fix}"
        super().__init__(line)
