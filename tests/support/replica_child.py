"""A small trainer with a replica, for the node-loss test: each start restores from the bucket
alone (nothing local), resumes into an empty directory, then trains one prompt per step, each
step a committed checkpoint, printing `ack <lsn> <time>` after every acknowledged commit.

    python replica_child.py URL ENDPOINT LOCAL_DIR SHIP_INTERVAL
"""

import sys
import time

from journal import GroupRef, Journal
from replay import restore


def main() -> None:
    url, endpoint, local, ship_interval = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    opts = {"endpoint": endpoint, "access_key_id": "test", "secret_access_key": "test",
            "region": "us-east-1", "client_options": {"allow_http": True}}
    state = restore(url, replica_options=opts)
    j = Journal.open(local, resume=state, replica=url, replica_options=opts, ship_interval=ship_interval)
    pos = state.loader_state["pos"] if state.loader_state else 0
    step = state.step or 0
    print(f"start {j.lsn} {pos}", flush=True)
    while True:
        step += 1
        with j.transaction() as tx:
            gids = tx.taken([GroupRef(idx=pos)], loader_state={"pos": pos + 1})
            tx.admitted(gids, target_step=step)
            tx.finished(gids)
            tx.trained(gids, step=step)
        pos += 1
        j.begin_checkpoint(step=step)
        lsn = j.commit_checkpoint(step=step)
        print(f"ack {lsn} {time.time()}", flush=True)
        time.sleep(0.005)


if __name__ == "__main__":
    main()
