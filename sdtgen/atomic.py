"""Write outputs through a temporary file renamed into place, so nothing is half written."""

import contextlib
import os
import tempfile
from pathlib import Path


def _default_mode() -> int:
    # mkstemp creates 0600; a generated file should get the usual 0666 & ~umask.
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_all_atomic(outputs: list[tuple[str | os.PathLike[str], bytes]]) -> None:
    """Write every changed output to a temporary file first, then rename them all into place.

    An error or an interrupt before the renames leaves every previous output as it was.
    """
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in outputs:
            target = Path(path)
            with contextlib.suppress(OSError):
                if target.read_bytes() == data:
                    continue  # unchanged: keep its mtime
            mode = _default_mode()
            with contextlib.suppress(OSError):
                mode = target.stat().st_mode & 0o7777
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
            staged.append((tmp, target))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
        while staged:
            tmp, target = staged[0]
            os.replace(tmp, target)
            staged.pop(0)
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """One output, written as write_all_atomic() writes several."""
    write_all_atomic([(path, data)])
