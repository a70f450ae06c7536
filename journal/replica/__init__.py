"""Object storage: the journal shipped to a bucket, its writer's lease, and its history read back.

`Journal.open(path, replica=URL, ...)` opens a replica through `open_replica`; the writer sees it
as a `ReplicaLink` (`link.py`). `obstore` is imported only when a store is opened.
"""

from .errors import LeaseLost, ReplicaConflict, ReplicaError, ReplicaTimeout
from .link import ReplicaLag, ReplicaLink, open_replica
from .shipper import (BACKOFF_FIRST, BACKOFF_MAX, Bucket, RetentionRequest, Shipper, describe,
                      open_store, shipped_filter)

__all__ = ["open_replica", "ReplicaLink", "ReplicaLag", "Shipper", "RetentionRequest",
           "ReplicaError", "ReplicaConflict", "ReplicaTimeout", "LeaseLost"]
