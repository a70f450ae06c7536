"""Object storage: the journal shipped to a bucket, its writer's lease, retention in the bucket,
and its history fetched back for a restore, verify or audit.

`link.py` (what the writer sees: `ReplicaLink`), `store.py` (the bucket seam: `Location`,
`Bucket`, declared capabilities, the options parser), `names.py` (object names), `retry.py`
(the one retry policy), `lease.py`, `shipper.py` (`open_replica`), `retention.py`, `fetch.py`,
`errors.py`. `obstore` is imported only when a store is opened.
"""

from .errors import (LeaseLost, ReplicaChanged, ReplicaConflict, ReplicaCorrupt, ReplicaError, ReplicaGap,
                     ReplicaReadError, ReplicaTimeout, ReplicaUnreachable)
from .link import ReplicaLag
from .store import Location, parse_options

# What a user needs: a bucket's location with its options (`Location`, and the parser of
# `--replica-options`), `Journal.replica_lag()`'s result and the errors. The writer's link, the
# bucket seam and the rest are importable from their modules.
__all__ = ["Location", "parse_options", "ReplicaLag",
           "ReplicaError", "ReplicaConflict", "ReplicaTimeout", "LeaseLost", "ReplicaReadError",
           "ReplicaGap", "ReplicaCorrupt", "ReplicaChanged", "ReplicaUnreachable"]
