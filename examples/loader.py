"""The examples' `StatefulDataLoader`, built without torchdata's deprecation noise.

torchdata's constructor calls `torch.set_vital`, which torch deprecated: a warning in every
trainer process that no caller can act on. Only that warning, only around the constructor,
is silenced; everything else the loader warns about still shows."""

from __future__ import annotations

import warnings

from torchdata.stateful_dataloader import StatefulDataLoader


def stateful_loader(dataset, **kwargs) -> StatefulDataLoader:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"'set_vital' is deprecated", UserWarning)
        return StatefulDataLoader(dataset, **kwargs)
