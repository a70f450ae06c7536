"""torch is loaded only where a tensor or a `.pt` file is handled.

`import journal`, `import snapshot` and `import replay` must not import torch (it costs
seconds and hundreds of MiB, and without numpy it prints `Failed to initialize NumPy`).
A loader state holding a tensor comes from a caller that imported torch; decoding one, and
reading or writing a cut's `.pt` files, imports it then. Each check runs in a fresh
interpreter, since this test process has torch loaded already.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import msgspec
import pytest
import torch

from journal.state import LoaderState
from replay import fingerprint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter with warnings shown (-W default); fails on a nonzero exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    p = subprocess.run([sys.executable, "-W", "default", "-c", textwrap.dedent(code), *args],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    return p


@pytest.mark.parametrize("package", ["journal", "snapshot", "replay"])
def test_import_does_not_load_torch(package):
    p = run_python(f"""
        import sys
        import {package}
        print("torch" in sys.modules)
    """)
    assert p.stdout.strip() == "False", f"import {package} imported torch"


def test_journal_round_trip_without_tensors_stays_torch_free(tmp_path):
    """Writing, reading and restoring a journal whose loader states hold no tensor (no cut yet)
    never loads torch, and prints nothing on stderr even when numpy is not installed."""
    p = run_python("""
        import sys
        sys.modules["numpy"] = None          # as in an environment without numpy
        from journal import GroupRef, Journal, Reader
        from replay import fingerprint, restore
        path = sys.argv[1]
        row = {"prompt": "2+2", "idx": 41}
        with Journal.open(path) as j:
            gids = j.taken([GroupRef(idx=41, task_name="math", fingerprint=fingerprint(row))],
                           loader_state={"epoch": 0, "consumed": [1, 2], "seed": (7, "x")})
            j.admitted(gids, target_step=1, policy_version=0)
        state = Reader(path).fold()
        assert state.loader.decode() == {"epoch": 0, "consumed": [1, 2], "seed": (7, "x")}
        got = restore(path, at="end", dataset=[row] * 42)
        assert [g.idx for g in got.admitted] == [41], got
        assert "torch" not in sys.modules
    """, str(tmp_path / "j"))
    assert p.stderr == ""


def test_tensor_loader_state_decodes_in_a_process_without_torch(tmp_path):
    """Packing finds torch through the caller; decoding a tensor leaf imports it on demand."""
    gen = torch.Generator().manual_seed(5).get_state()  # > 512 bytes: stored as a blob
    obj = {"gen": gen, "small": torch.arange(6, dtype=torch.int16).reshape(2, 3), "n": 3}
    ls = LoaderState.from_object(obj)
    packed = tmp_path / "state.msgpack"
    packed.write_bytes(msgspec.msgpack.encode([ls.packed, ls.blobs]))
    p = run_python("""
        import sys
        import msgspec
        from journal.state import LoaderState
        from journal.events import PackedLoaderState
        packed, blobs = msgspec.msgpack.decode(open(sys.argv[1], "rb").read(),
                                               type=tuple[PackedLoaderState, dict[bytes, bytes]])
        assert "torch" not in sys.modules
        state = LoaderState(packed, blobs).decode()
        print(type(state["gen"]).__module__, state["gen"].dtype, list(state["small"].shape),
              state["small"].tolist(), state["n"], bytes(state["gen"].numpy()).hex())
    """, str(packed))
    want = f"torch torch.uint8 [2, 3] [[0, 1, 2], [3, 4, 5]] 3 {bytes(gen.numpy()).hex()}"
    assert p.stdout.strip() == want


def test_numpy_row_fingerprint_in_a_process_without_torch():
    """A numpy array fingerprints as the tensor it converts to, also when torch was not loaded."""
    p = run_python("""
        import sys
        import numpy as np
        from replay import fingerprint
        print(fingerprint({"ids": np.arange(5, dtype=np.int64), "w": 0.5}).hex())
    """)
    assert p.stdout.strip() == fingerprint({"ids": torch.arange(5), "w": 0.5}).hex()
