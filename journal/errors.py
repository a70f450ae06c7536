"""Exception classes of the journal; every message names the file, offset, LSN or group."""


class JournalError(Exception):
    """Base class of every error the journal raises."""


class OwnershipError(JournalError):
    """A transition names a group that is not in the event's `from` owner."""

    def __init__(self, message: str, *, group_id: int | None = None, lsn: int | None = None):
        super().__init__(message)
        self.group_id = group_id
        self.lsn = lsn


class StaleAttempt(OwnershipError):
    """A rollout event names an attempt other than the rollout's current one: a late result of
    work that was given up (a killed or superseded worker). Nothing was written; the result
    must not be trained on (drop its data-plane row)."""

    def __init__(self, message: str, *, group_id: int, lsn: int | None, index: int, attempt: int,
                 current: int):
        super().__init__(message, group_id=group_id, lsn=lsn)
        self.index = index
        self.attempt = attempt
        self.current = current


class RolloutEnded(OwnershipError):
    """`rollout_progress` of a rollout that is sealed: its progress ended with the seal. Nothing
    was written; the partial row is not needed (drop it)."""

    def __init__(self, message: str, *, group_id: int, lsn: int | None, index: int, attempt: int):
        super().__init__(message, group_id=group_id, lsn=lsn)
        self.index = index
        self.attempt = attempt


class JournalCorrupt(JournalError):
    """Damage that is not a torn tail: a bad frame, a broken chain, a bad header."""

    def __init__(self, message: str, *, segment: str | None = None, offset: int | None = None,
                 lsn: int | None = None):
        super().__init__(message)
        self.segment = segment
        self.offset = offset
        self.lsn = lsn


class StateFileCorrupt(JournalError):
    """A journal state file (`journal/state_file.py`) that is torn, damaged or not one: it is
    never used (the open falls back to an older one or folds from LSN 1)."""


class JournalFailed(JournalError):
    """A write or fsync failed earlier; the journal is fail-stop and refuses every call."""


class JournalLocked(JournalError):
    """Another process holds the journal open for writing."""


class JournalClosed(JournalError):
    """The journal was closed; open it again to write."""


class JournalIOError(JournalError):
    """An operating-system error while opening, repairing, compacting or retiring files.

    `path` is the file or directory involved, `operation` what was being done to it
    ("copy the torn tail aside", "write the cut", ...), `errno` the OS error number. The
    operation left no partial file behind; free space or fix permissions, then retry."""

    def __init__(self, message: str, *, path: str | None = None, operation: str | None = None,
                 errno: int | None = None):
        super().__init__(message)
        self.path = path
        self.operation = operation
        self.errno = errno

    @classmethod
    def from_os_error(cls, exc: OSError, operation: str, path: str) -> "JournalIOError":
        """`exc` (raised while doing `operation` to `path`) as a JournalIOError; its `path` is
        the file the OS error names, else `path`."""
        where = exc.filename if isinstance(exc.filename, str) else path
        return cls(f"{operation}: {where}: {exc.strerror or exc} (errno {exc.errno}); nothing "
                   "half-written was left behind: fix the cause (free space, permissions, the "
                   "file named), then retry", path=where, operation=operation, errno=exc.errno)


class TransactionClosed(JournalClosed):
    """A call on a transaction whose `with` block has ended; nothing was written."""


class JournalWarning(UserWarning):
    """Something the caller most likely did not mean, such as continuing a crashed run's
    history without `resume=`."""

