"""Object storage: the journal shipped to a bucket, its writer's lease, retention in the bucket,
and its history fetched back for a restore, verify or audit.

`link.py` (what the writer sees: `ReplicaLink`), `store.py` (the bucket seam: `Location`,
`Bucket`, declared capabilities, the options parser), `names.py` (object names), `retry.py`
(the one retry policy), `lease.py`, `shipper.py` (`open_replica`), `retention.py`, `fetch.py`,
`errors.py`. `obstore` is imported only when a store is opened.
"""

from .errors import (LeaseLost, ReplicaChanged, ReplicaConflict, ReplicaCorrupt, ReplicaError, ReplicaGap,
                     ReplicaReadError, ReplicaTimeout, ReplicaUnreachable)
from .link import ReplicaLag, ReplicaLink
from .retention import RetentionDecision, RetentionRequest
from .shipper import open_replica
from .store import Location, is_replica, parse_options

__all__ = ["Location", "open_replica", "ReplicaLink", "ReplicaLag", "RetentionDecision",
           "RetentionRequest", "is_replica", "parse_options",
           "ReplicaError", "ReplicaConflict", "ReplicaTimeout", "LeaseLost", "ReplicaReadError",
           "ReplicaGap", "ReplicaCorrupt", "ReplicaChanged", "ReplicaUnreachable"]
