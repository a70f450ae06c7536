"""Warnings of the packages a session is used with that no trainer can act on, silenced when the
session is imported (`replay` imports it).

torchdata's `StatefulDataLoader` calls `torch.set_vital` in its constructor, which torch
deprecated: "'set_vital' is deprecated, please do not call", in every trainer process. The filter
is the process's (a loader is built by the trainer, before any session call), so it matches
only that message, only from torchdata's modules; every other warning shows as before.
"""

import warnings

warnings.filterwarnings("ignore", message=r"'set_vital' is deprecated", category=UserWarning,
                        module=r"torchdata\.")
