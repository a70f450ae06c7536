"""The library's data planes (the protocol: `snapshot.DataPlane`, `snapshot/data_plane.py`).

`LocalDataPlane(root)`: rows packed into append-only files in a directory (`local.py`).
`ObjectStoreDataPlane(url, options)`: immutable objects in a bucket, with the replica's URLs
and options. Both store rows in the row codec (`rows.py`: no pickle) under the locators of
`names.py`.
"""

from .local import LocalDataPlane
from .object_store import ObjectStoreDataPlane

__all__ = ["LocalDataPlane", "ObjectStoreDataPlane"]
