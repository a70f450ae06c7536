"""A small trainer whose groups have rollouts, for the audit tests: one step ahead (the groups of
step S+1 are admitted with `rollouts=N` and their rollout 0 sealed while step S finishes), a
rollout now and then failing once and sealing at its next attempt, checkpoints, and resumes
from `replay.restore` of a journal or of a cut (whose fences raise the attempts of the
unsealed rollouts: `rollout_failed(reason="abandoned_on_restore")`)."""

from __future__ import annotations

from journal import GroupRef, Journal, RolloutRef
from replay import restore

from tests.support.cli_journals import TASK, Loader


class RolloutTrainer:
    def __init__(self, path: str, *, rows: int = 10, batch: int = 3, rollouts: int = 3,
                 segment_bytes: int = 4096, source: str | None = None):
        """A new journal at `path`, or with `source` (a journal or a cut) one resumed from it."""
        self.path, self.batch, self.n, self.segment_bytes = path, batch, rollouts, segment_bytes
        self.loader = Loader(rows)
        self.inflight: dict[int, list[int]] = {}  # target step -> admitted group ids
        self.step_no = 0
        self.j = None
        if source is not None:
            self.resume(source)
        else:
            self.j = Journal.open(path, sync="none", segment_bytes=segment_bytes)

    def _admit(self, step: int) -> None:
        rows = self.loader.next_batch(self.batch)
        gids = self.j.taken([GroupRef(idx=i, task_name=TASK, epoch=e) for e, i in rows],
                            loader_state=self.loader.state_dict())
        self.j.admitted(gids, target_step=step, policy_version=step - 1, rollouts=self.n)
        self.j.rollout_sealed([RolloutRef(g, 0, 0, f"dp/{g}/0") for g in gids], policy_version=step - 1)
        self.inflight[step] = gids

    def _seal_the_rest(self, gid: int) -> None:
        g = self.j.state_copy().live[gid]
        r = g.rollouts
        for i in r.unsealed():
            attempt = r.attempts[i]
            if (g.idx + i) % 3 == 0:  # fails once, regenerates (by row: the same after any resume)
                self.j.rollout_failed([RolloutRef(gid, i, attempt)], reason="timeout")
                attempt += 1
            self.j.rollout_sealed([RolloutRef(gid, i, attempt, f"dp/{gid}/{i}")], policy_version=self.step_no)

    def step(self) -> None:
        s = self.step_no = self.step_no + 1
        if s not in self.inflight:
            self._admit(s)
        self._admit(s + 1)
        cur = self.inflight.pop(s)
        for g in cur:
            self._seal_the_rest(g)
        self.j.finished(cur, policy_version=s - 1)
        self.j.trained(cur, step=s)

    def run(self, steps: int, checkpoint_every: int = 2) -> None:
        for _ in range(steps):
            self.step()
            if self.step_no % checkpoint_every == 0:
                self.j.begin_checkpoint(step=self.step_no)
                self.j.commit_checkpoint(step=self.step_no)

    def resume(self, source: str | None = None) -> None:
        """Restore `source` (a journal or a cut; default this journal) and carry on in this one."""
        if self.j is not None:
            self.j.close()
        st = restore(source or self.path)
        self.loader.load_state_dict(st.loader_state)
        self.j = Journal.open(self.path, sync="none", segment_bytes=self.segment_bytes, resume=st)
        self.step_no = st.step
        self.inflight = {}
        for g in st.admitted:
            self.inflight.setdefault(g.target_step, []).append(g.group_id)
        assert not st.reserved and not st.replay and not st.spare
