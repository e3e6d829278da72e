"""Write several outputs so that they all change together or not at all.

Every destination is checked before the first byte is written: it must be a
regular file, a symbolic link (the link itself is replaced, never the file it
names) or absent, in an existing directory, and no two outputs, nor an output
and an input, may be one file (by real path or by inode). Each output is
written to a temporary file beside it and renamed into place, all with SIGINT,
SIGTERM and SIGHUP held back, so an interrupt leaves either every old output
or every new one, and never a temporary file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from sdtgen.errors import SdtError, printable
from sdtgen.plaindata import record

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@record(frozen=True)
class _Plan:
    target: Path
    data: bytes | bytearray
    mode: int  # permission bits for the new file
    unchanged: bool  # the file already holds exactly these bytes: keep it (and its mtime)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _default_mode() -> int:
    # mkstemp creates 0600; a generated file should get the usual 0666 & ~umask.
    return 0o666 & ~_umask()


def _identity(path: Path) -> tuple[str, tuple[int, int] | None]:
    """A path's real path and, when it exists, its (device, inode)."""
    try:
        st = os.stat(path)
        ino = (st.st_dev, st.st_ino)
    except OSError:
        ino = None
    return os.path.realpath(path), ino


def _lstat_in_writable_dir(target: Path, role: str) -> os.stat_result | None:
    """The lstat of ``target``, or None when it does not exist; its directory must exist and be writable."""
    shown = printable(str(target))
    parent = target.parent
    if not parent.is_dir():
        raise SdtError(shown, f"cannot write the {role}: directory {printable(str(parent))} does not exist",
                       "create the directory first, or give another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SdtError(shown, f"cannot write the {role}: directory {printable(str(parent))} is not writable",
                       "give a path in a directory you can write")
    try:
        return os.lstat(target)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SdtError(shown, f"cannot write the {role}: {e.strerror}", "give another path") from None


def _destination(path: str | os.PathLike[str], role: str) -> os.stat_result | None:
    """Check that ``path`` may be written; its lstat, or None when it does not exist yet."""
    target = Path(path)
    shown = printable(str(target))
    st = _lstat_in_writable_dir(target, role)
    if st is None:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise SdtError(shown, f"the {role} would replace a directory", "give a file name, not a directory")
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        raise SdtError(shown, f"the {role} would replace a {_kind(st.st_mode)}, not a regular file",
                       "give the path of a regular file, or one that does not exist yet")
    return st


def check_outputs(outputs: list[tuple[str, str | os.PathLike[str]]],
                  inputs: list[tuple[str, str | os.PathLike[str]]] = ()) -> None:
    """Refuse, before any work, an output that cannot be written or that is another output or an input."""
    for role, path in outputs:
        _destination(path, role)
    check_distinct([*inputs, *outputs])


def _plan(path: str | os.PathLike[str], data: bytes | bytearray, role: str) -> _Plan:
    target = Path(path)
    st = _destination(target, role)
    if st is None or stat.S_ISLNK(st.st_mode):
        return _Plan(target, data, _default_mode(), False)  # a link is replaced; its target's bits are not ours
    return _Plan(target, data, st.st_mode & 0o777, _holds(target, data, st.st_size))


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def _holds(target: Path, data: bytes | bytearray, size: int) -> bool:
    """Whether a regular file already holds ``data``; reads at most len(data) + 1 bytes of it."""
    if size != len(data):
        return False
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        old = bytearray()
        while len(old) <= len(data):
            chunk = os.read(fd, min(1 << 20, len(data) + 1 - len(old)))
            if not chunk:
                break
            old += chunk
        return old == data
    except OSError:
        return False
    finally:
        os.close(fd)


def check_distinct(named: list[tuple[str, str | os.PathLike[str]]]) -> None:
    """Refuse two roles (inputs and outputs) that name one file, by real path or by inode."""
    seen: dict[object, str] = {}
    for role, path in named:
        real, ino = _identity(Path(path))
        for key in (real, ino):
            if key is None:
                continue
            if key in seen and seen[key] != role:
                raise SdtError(printable(str(path)), f"the {role} and the {seen[key]} are the same file",
                               "give each output its own path, none of them the input")
            seen.setdefault(key, role)


@contextlib.contextmanager
def _held():
    """SIGINT, SIGTERM and SIGHUP wait until the block ends (then act as usual)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def write_all_atomic(outputs: list[tuple[str | os.PathLike[str], bytes | bytearray]],
                     roles: list[str] | None = None) -> None:
    """Write every changed output to a temporary file first, then rename them all into place at once.

    Destinations are validated before anything is written; an error, SIGINT, SIGTERM or SIGHUP
    before the renames leaves every previous output as it was, and no temporary file.
    """
    roles = roles or [f"output {i + 1}" for i in range(len(outputs))]
    plans = [_plan(path, data, role) for (path, data), role in zip(outputs, roles, strict=True)]
    # Signals wait while files are written and renamed (tens of milliseconds for a kernel object):
    # one that arrives acts after the last rename, or one before the first temporary file left
    # nothing behind. Catching SIGTERM instead would leave windows between the catch and the cleanup.
    with _held():
        staged: list[tuple[str, Path]] = []
        try:
            for p in plans:
                if p.unchanged:
                    continue
                fd, tmp = _mkstemp(p.target)
                staged.append((tmp, p.target))
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(p.data)
                    os.chmod(tmp, p.mode)
                except OSError as e:
                    raise SdtError(printable(str(p.target)), f"cannot write: {e.strerror}",
                                   "check the free space and permissions") from None
            _rename_all(staged)
            staged.clear()
        finally:
            for tmp, _ in staged:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def _rename_all(staged: list[tuple[str, Path]]) -> None:
    """Rename every temporary file into place; if one rename fails, put back what the others replaced.

    Each existing output keeps a second name (a hard link) until all renames are done.
    """
    kept: list[tuple[Path, str | None]] = []  # (target, its old file's second name, or None: it was absent)
    try:
        for tmp, target in staged:
            old = f"{tmp}.old"
            try:
                os.link(target, old, follow_symlinks=False)
            except FileNotFoundError:
                old = None
            except OSError as e:
                raise SdtError(printable(str(target)), f"cannot write: {e.strerror}",
                               "check the directory's permissions") from None
            kept.append((target, old))
            os.replace(tmp, target)
    except BaseException:
        for target, old in reversed(kept):
            with contextlib.suppress(OSError):
                if old is None:
                    os.unlink(target)
                else:
                    os.replace(old, target)
        raise
    finally:
        for _, old in kept:
            if old is not None:
                with contextlib.suppress(OSError):
                    os.unlink(old)


def _mkstemp(target: Path) -> tuple[int, str]:
    try:
        return tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise SdtError(printable(str(target)), f"cannot write: {e.strerror}",
                       "check the directory's permissions") from None


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """One output, written as write_all_atomic() writes several."""
    write_all_atomic([(path, data)])


def _swap_in(tmp: str, target: Path, replace_old: bool, shown: str) -> None:
    """Rename ``tmp`` to ``target``; an old non-empty ``target`` goes aside first and comes back on failure."""
    old = f"{tmp}.old"
    try:
        if replace_old:
            os.rename(target, old)
        try:
            os.rename(tmp, target)  # replaces an empty directory
        except OSError:
            if replace_old:
                os.rename(old, target)
            raise
    except OSError as e:
        raise SdtError(shown, f"cannot write: {e.strerror}", "check the directory's permissions") from None
    if replace_old:
        shutil.rmtree(old, ignore_errors=True)


def _what(mode: int) -> str:
    return "regular file" if stat.S_ISREG(mode) else "symbolic link" if stat.S_ISLNK(mode) else _kind(mode)


class Staged:
    """One output written over time (a trace while the kernel runs) beside its destination, then put in place.

    The destination is checked when this is made, before anything runs; ``commit`` renames the file or
    directory into place with SIGINT, SIGTERM and SIGHUP held back, and ``discard`` removes it: an
    output is there whole or not at all. A directory replaces an existing one only when it is empty or
    ``replaceable`` says it is a ``kind`` this program wrote.
    """

    def __init__(self, path: str | os.PathLike[str], role: str, directory: bool = False,
                 replaceable: Callable[[Path], bool] | None = None, kind: str = "") -> None:
        self.target = Path(path)
        self.role = role
        self.directory = directory
        self.replace_old = False
        shown = printable(str(self.target))
        if directory:
            st = _lstat_in_writable_dir(self.target, role)
            if st is not None:
                if not stat.S_ISDIR(st.st_mode):
                    raise SdtError(shown, f"the {role} is a directory and this path is a {_what(st.st_mode)}",
                                   "give the path of a new directory")
                self.replace_old = any(self.target.iterdir())
                if self.replace_old and not (replaceable and replaceable(self.target)):
                    raise SdtError(shown, f"the {role} would replace a directory that is not a {kind}",
                                   "give a new path, an empty directory or an earlier one of these")
            self.mode = _default_mode()
        else:
            st = _destination(self.target, role)
            self.mode = st.st_mode & 0o777 if st is not None and stat.S_ISREG(st.st_mode) else _default_mode()
        self.done = True  # nothing to discard until the temporary file exists
        try:
            with _held():
                try:
                    if directory:
                        self.tmp = tempfile.mkdtemp(prefix=f".{self.target.name}.", suffix=".tmp",
                                                    dir=self.target.parent)
                    else:
                        fd, self.tmp = tempfile.mkstemp(prefix=f".{self.target.name}.", suffix=".tmp",
                                                        dir=self.target.parent)
                        os.close(fd)
                except OSError as e:
                    raise SdtError(shown, f"cannot write: {e.strerror}",
                                   "check the directory's permissions") from None
                self.done = False
        except BaseException:
            # A signal held while the file was made is raised as the block ends, out of this constructor: no
            # caller holds this object to discard it, so it is discarded here (another signal waits for that).
            with _held():
                self.discard()
            raise

    def path(self, name: str = "") -> str:
        """Where to write: the temporary file, or a file ``name`` in the temporary directory."""
        return os.path.join(self.tmp, name) if self.directory else self.tmp

    def commit(self) -> None:
        with _held():
            try:
                if self.directory:
                    for name in os.listdir(self.tmp):
                        os.chmod(os.path.join(self.tmp, name), self.mode)
                    os.chmod(self.tmp, 0o777 & ~_umask())
                    _swap_in(self.tmp, self.target, self.replace_old, printable(str(self.target)))
                else:
                    os.chmod(self.tmp, self.mode)
                    _rename_all([(self.tmp, self.target)])
                self.done = True
            finally:
                self.discard()

    def discard(self) -> None:
        if not self.done:
            if self.directory:
                shutil.rmtree(self.tmp, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(self.tmp)
        self.done = True
