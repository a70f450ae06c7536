"""One "node" of the two-writer test: a process of its own, with its own local directory, holding
a journal shipped to a bucket; driven by one command per line on stdin, one JSON answer per line
on stdout (`{"ok": true}` or `{"error": class name, "message": ...}`, with the timeline and the
LSN of the last commit acknowledged once a journal is open).

    python -m tests.support.replica_node URL OPTIONS_JSON LOCAL_DIR SHIP_INTERVAL

Commands: `open` (a plain open), `resume` (restore from the bucket alone, then open with
resume=: a takeover), `train N` (N prompts, each step a committed checkpoint), `flush`
(flush_replica), `close`.
"""

import json
import sys

from journal import GroupRef, Journal, JournalError
from replay import restore


class Node:
    def __init__(self, url: str, options: dict, local: str, ship_interval: float):
        self.url, self.options, self.local, self.ship = url, options, local, ship_interval
        self.j: Journal | None = None
        self.acked = 0   # the LSN of the last commit acknowledged

    def _open(self, resume=None) -> None:
        self.j = Journal.open(self.local, resume=resume, replica=self.url, replica_options=self.options,
                              ship_interval=self.ship)
        self.acked = self.j.lsn

    def run(self, command: str) -> None:
        verb, _, arg = command.partition(" ")
        if verb == "open":
            self._open()
        elif verb == "resume":
            self._open(restore(self.url, replica_options=self.options))
        elif verb == "train":
            self.train(int(arg))
        elif verb == "flush":
            self.j.flush_replica(timeout=30)
        elif verb == "close":
            self.j.close()
        else:
            raise ValueError(f"unknown command {command!r}")

    def train(self, steps: int) -> None:
        pos = (self.j.loader_state() or {"pos": 0})["pos"]
        for i in range(pos, pos + steps):
            gids = self.j.taken([GroupRef(idx=i)], loader_state={"pos": i + 1})
            self.acked = self.j.admitted(gids, target_step=i + 1)
            self.acked = self.j.finished(gids)
            self.acked = self.j.trained(gids, step=i + 1)
            self.acked = self.j.begin_checkpoint(step=i + 1)
            self.acked = self.j.commit_checkpoint(step=i + 1)


def main() -> None:
    node = Node(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
    for line in sys.stdin:
        try:
            node.run(line.strip())
            answer = {"ok": True}
        except JournalError as exc:
            answer = {"error": type(exc).__name__, "message": str(exc)}
        if node.j is not None:
            answer.update(lsn=node.acked, timeline=node.j.timeline)
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
