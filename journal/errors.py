"""Exception classes of the journal; every message names the file, offset, LSN or group."""


class JournalError(Exception):
    """Base class of every error the journal raises."""


class OwnershipError(JournalError):
    """A transition names a group that is not in the event's `from` owner."""

    def __init__(self, message: str, *, group_id: int | None = None, lsn: int | None = None):
        super().__init__(message)
        self.group_id = group_id
        self.lsn = lsn


class JournalCorrupt(JournalError):
    """Damage that is not a torn tail: a bad frame, a broken chain, a bad header."""

    def __init__(self, message: str, *, segment: str | None = None, offset: int | None = None,
                 lsn: int | None = None):
        super().__init__(message)
        self.segment = segment
        self.offset = offset
        self.lsn = lsn


class JournalFailed(JournalError):
    """A write or fsync failed earlier; the journal is fail-stop and refuses every call."""


class JournalLocked(JournalError):
    """Another process holds the journal open for writing."""


class JournalClosed(JournalError):
    """The journal was closed; open it again to write."""
