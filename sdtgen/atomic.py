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


def write_atomic(path: str | os.PathLike[str], data: bytes, *, keep_mode: bool = False) -> bool:
    """Replace ``path`` with ``data`` atomically; leave it alone when unchanged.

    Returns True when the file was (re)written. An unchanged file keeps its
    mtime so make does not rebuild what depends on it.
    """
    target = Path(path)
    with contextlib.suppress(OSError):
        if target.read_bytes() == data:
            return False
    mode = _default_mode()
    if keep_mode:
        with contextlib.suppress(OSError):
            mode = target.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True
