"""`loader_state`: the one builder of StatefulDataLoader-like loader states the workloads take with."""

from __future__ import annotations

import torch


def loader_state(n: int, epoch: int, *, blob_bytes: int = 600) -> dict:
    """The state after `n` samples in `epoch`: a generator-like uint8 tensor of `blob_bytes`
    (none when 0) that changes once per epoch (stored as a blob when >= 512 bytes, so once per
    segment), counters that change on every take, a tuple, a nested dict holding None and a
    float, and an int key holding a bool and bytes."""
    inner: dict = {}
    if blob_bytes:
        inner["generator"] = torch.arange(blob_bytes, dtype=torch.int64).remainder(251).to(torch.uint8) + epoch % 5
    inner["yielded"] = n
    return {"_sampler_iter_state": inner, "_num_yielded": n, "epoch": epoch, "pos": (epoch, n),
            "_snapshot": {"_main_snapshot": {"fetcher": [n, None, 1.5]}}, 3: [True, b"raw"]}
