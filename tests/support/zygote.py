"""Forked runs of a module's `main(argv)` from a process that imported it once.

    python -m tests.support.zygote MODULE        (the server; tests use `Zygote(MODULE)`)

The server imports MODULE (for TRL: torch, transformers and TRL, about 5 s here), prints READY,
then serves its stdin: "run LOG ARGV_JSON" forks a child that runs `MODULE.main(argv)` with stdout
and stderr appended to LOG and exits with its return value (1 on an exception), and prints
"PID <pid>"; "wait PID" reaps it and prints "EXIT <pid> <code>" (a negative code is the signal that
ended it). A forked child is a new process for all the run does (its files, threads, journal);
only the imports are shared. The server has one thread, so nothing is half-held when it forks.
"""

from __future__ import annotations

import importlib
import json
import os
import queue
import subprocess
import sys
import threading
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def _child(module, log: str, argv: list[str]) -> None:
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)
        code = module.main(argv) or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        os._exit(code)


def serve(name: str) -> None:
    module = importlib.import_module(name)
    _say("READY")
    for line in sys.stdin:
        cmd = line.split(" ", 2)
        if cmd[0] == "run":
            pid = os.fork()
            if pid == 0:
                _child(module, cmd[1], json.loads(cmd[2]))
            _say(f"PID {pid}")
        elif cmd[0] == "wait":
            pid, status = os.waitpid(int(cmd[1]), 0)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _say(f"EXIT {pid} {code}")


class Zygote:
    """The test's side: a server of `module` started once, one forked run at a time."""

    def __init__(self, module: str, env: dict | None = None, timeout: float = 300):
        path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.zygote", module], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {}), "PYTHONPATH": path})
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._expect("READY", timeout)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def _expect(self, prefix: str, timeout: float) -> str:
        line = self.lines.get(timeout=timeout)
        if line is None or not line.startswith(prefix):
            raise RuntimeError(f"zygote said {line!r}, expected {prefix!r} (exit {self.proc.poll()})")
        return line

    def _send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def start(self, argv: list[str], log: str) -> int:
        self._send(f"run {log} {json.dumps(argv)}")
        return int(self._expect("PID ", 60).split()[1])

    def wait(self, pid: int, timeout: float) -> int:
        """The run's exit code once it ended (negative: the signal)."""
        self._send(f"wait {pid}")
        return int(self._expect(f"EXIT {pid} ", timeout).split()[2])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


if __name__ == "__main__":
    serve(sys.argv[1])
