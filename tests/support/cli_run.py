"""Running the real `journal-inspect` console script in a subprocess, for the CLI tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

_EXE = shutil.which("journal-inspect")
COMMAND = [_EXE] if _EXE else [sys.executable, "-m", "replay.cli"]


def cli(*args: str, code: int | None = 0, env: dict | None = None, timeout: float = 120,
        stderr_tty: bool = False) -> subprocess.CompletedProcess:
    """Run `journal-inspect ARGS`; check the exit code (unless `code` is None) and that no
    traceback was printed."""
    full_env = {**os.environ, **(env or {})}
    if stderr_tty:
        import pty
        master, slave = pty.openpty()
        try:
            p = subprocess.Popen([*COMMAND, *args], stdout=subprocess.PIPE, stderr=slave, env=full_env)
            os.close(slave)
            slave = -1
            chunks = []
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    break
                if not data:
                    break
                chunks.append(data)
            out = p.stdout.read()
            p.wait(timeout)
        finally:
            os.close(master)
            if slave >= 0:
                os.close(slave)
        result = subprocess.CompletedProcess(p.args, p.returncode, out.decode(),
                                             b"".join(chunks).decode(errors="replace"))
    else:
        result = subprocess.run([*COMMAND, *args], capture_output=True, text=True, env=full_env,
                                timeout=timeout)
    assert "Traceback" not in result.stderr, result.stderr
    if code is not None and result.returncode != code:
        pytest.fail(f"journal-inspect {' '.join(args)} exited {result.returncode}, expected {code}\n"
                    f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}")
    return result


def cli_json(*args: str, code: int | None = 0, **kw):
    r = cli(*args, "--json", code=code, **kw)
    return json.loads(r.stdout)


def cli_json_lines(*args: str, code: int | None = 0, **kw) -> list[dict]:
    r = cli(*args, "--json", code=code, **kw)
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def cli_many(calls: dict, workers: int = 3) -> dict:
    """Run several invocations at once (the console script's start-up is mostly importing torch,
    so overlapping them saves most of the wall time). `calls`: name -> dict(args=[...], code=0,
    env=None, json=False|"doc"|"lines"). Returns name -> CompletedProcess with `.doc` set to the
    parsed JSON when asked."""
    from concurrent.futures import ThreadPoolExecutor

    def one(spec):
        args = list(spec["args"]) + (["--json"] if spec.get("json") else [])
        r = cli(*args, code=spec.get("code", 0), env=spec.get("env"))
        if spec.get("json") == "lines":
            r.doc = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        elif spec.get("json"):
            r.doc = json.loads(r.stdout)
        return r

    with ThreadPoolExecutor(workers) as pool:
        futures = {name: pool.submit(one, spec) for name, spec in calls.items()}
        return {name: f.result() for name, f in futures.items()}
