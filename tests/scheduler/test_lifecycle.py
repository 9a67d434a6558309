"""A job's life behind the in-memory state: queued at registration, running from
its first join, ended with final figures by its trainers, by an operator, or
when every rank left; a new life on registering again; ended records purged
by the retention rule; the active list and the history read that record."""

from __future__ import annotations

import pytest

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.common.errors import FailedPrecondition
from gpufair.common.keys import Keys
from gpufair.common.memstate import MemoryState
from gpufair.common.tokens import JobTokens
from gpufair.scheduler.hub import CommandHub
from gpufair.scheduler.housekeeping import LifeSettings
from gpufair.scheduler.jobs import JobSpec, Placement
from gpufair.scheduler.lifecycle import JobLife, Phase, Retention, ended, final_slowdown, new_life, to_purge
from gpufair.scheduler.loop import DecisionLoop
from gpufair.scheduler.profiles import ProfileStore
from gpufair.scheduler.registry import JobRegistry
from gpufair.scheduler.servicer import SchedulerServicer
from gpufair.scheduler.snapshot import JobMetrics, RankMetrics
from gpufair.scheduler.sources import PolicySettings, PolicyStore

KEYS = Keys("/t")


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class _Leader:
    is_leader = True


def _spec(job: str, total: int = 6400, exclusive: float = 0.0) -> JobSpec:
    return JobSpec(job, "resnet", 64, total, tuple(Placement(r, "n1", f"{job}-g{r}") for r in range(2)), exclusive)


def _metrics(done: int, rate: float = 64.0) -> JobMetrics:
    return JobMetrics(rate, done, 1.0, {r: RankMetrics(0.001, 0.001, done // 64) for r in range(2)}, 2.0)


class _World:
    def __init__(self, lost_s: float = 5.0, retention: Retention = Retention()) -> None:
        self.clock = _Clock()
        self.state = MemoryState()
        self.hub = CommandHub()
        self.closed: list[str] = []
        self.registry = JobRegistry(self.state, KEYS, on_split=self.hub.publish, on_removed=self.closed.append, clock=self.clock)
        self.metrics: dict[str, JobMetrics] = {}
        policies = PolicyStore(self.state, KEYS, PolicySettings("even", 1.0, 0.05))
        self.loop = DecisionLoop(self.state, KEYS, self.registry, _Leader(), policies, self._fetch, self._profiles,
                                 clock=self.clock, life=LifeSettings(lost_s, retention))
        self.servicer = SchedulerServicer(self.registry, self.hub, self.loop, policies, ProfileStore(self.state, KEYS),
                                          JobTokens("s"), "replica")

    async def _fetch(self) -> dict[str, JobMetrics]:
        return self.metrics

    async def _profiles(self) -> dict:
        return {}

    def life(self, job: str) -> JobLife:
        life = self.registry.view(job).life
        assert life is not None
        return life

    async def listed(self, include_finished: bool = False) -> dict[str, pb.JobSummary]:
        res = await self.servicer.ListJobs(pb.ListJobsRequest(include_finished=include_finished), None)
        return {j.spec.job_id: j for j in res.jobs}


@pytest.fixture
async def world():
    w = _World()
    w.registry.start_background()
    assert await w.registry.wait_ready(2)
    yield w
    await w.registry.stop()


async def test_a_job_is_queued_until_a_rank_joins_then_running_from_that_moment(world: _World) -> None:
    await world.registry.register(_spec("a"), (32, 32), "even")
    assert world.life("a").phase is Phase.QUEUED and world.life("a").started_unix_s == 0
    assert (await world.listed())["a"].state == pb.JOB_STATE_QUEUED
    world.clock.now = 1_010.0
    member = await world.registry.join("a", 0, "replica")
    await world.registry.join("a", 1, "replica")
    assert world.life("a").phase is Phase.RUNNING and world.life("a").started_unix_s == 1_010.0
    await world.registry.leave("a", 0, member)
    world.clock.now = 1_020.0
    await world.registry.join("a", 0, "replica")  # a rank reconnecting does not restart the clock
    assert world.life("a").started_unix_s == 1_010.0


async def test_session_close_ends_the_job_with_its_final_figures_and_it_leaves_the_active_list(world: _World) -> None:
    await world.registry.register(_spec("a", total=6400, exclusive=100.0), (32, 32), "even")
    await world.registry.register(_spec("b"), (32, 32), "even")
    await world.registry.join("a", 0, "replica")
    world.clock.now = 1_128.0  # 128 s for 6,400 samples that take 64 s alone: SD 2
    res = await world.servicer.DeregisterJob(pb.DeregisterJobRequest(job_id="a", samples_done=6400), None)
    assert res.ended and res.job.state == pb.JOB_STATE_FINISHED
    life = world.life("a")
    assert life.phase is Phase.FINISHED and life.jct_s == pytest.approx(128.0) and life.slowdown == pytest.approx(2.0)
    assert world.closed == ["a"]  # its command streams end
    assert set(await world.listed()) == {"b"}  # the active list: ended jobs are not ghosts
    everything = await world.listed(include_finished=True)
    assert everything["a"].state == pb.JOB_STATE_FINISHED and everything["a"].slowdown == pytest.approx(2.0)
    assert everything["a"].samples_done == 6400 and everything["a"].progress == 1.0 and everything["a"].elapsed_s == pytest.approx(128.0)
    again = await world.servicer.DeregisterJob(pb.DeregisterJobRequest(job_id="a", outcome=pb.JOB_OUTCOME_FAILED), None)
    assert not again.ended and world.life("a").phase is Phase.FINISHED  # the first ending stays
    with pytest.raises(FailedPrecondition, match="has ended"):
        await world.servicer.PinSplit(pb.PinSplitRequest(job_id="a", batch_sizes=[40, 24]), None)


async def test_an_ended_job_registered_again_starts_a_new_life_with_newer_split_versions(world: _World) -> None:
    first = (await world.registry.register(_spec("a"), (32, 32), "even")).split
    await world.registry.pin("a", (40, 24))
    await world.registry.end("a", Phase.FAILED, "crashed", 640, 0.0)
    second = await world.registry.register(_spec("a"), (32, 32), "even")
    assert second.life is not None and second.life.phase is Phase.QUEUED and second.pinned is None
    assert second.split is not None and second.split.version > first.version + 1
    assert [h.version for h in await world.registry.history("a", 10)] == [second.split.version]  # the old life's history went
    listed = (await world.listed())["a"]
    assert listed.split.number == 1  # shown as the first split of this life, whatever its version


async def test_a_running_job_whose_ranks_all_left_ends_after_the_grace(world: _World) -> None:
    await world.registry.register(_spec("a", total=6400), (32, 32), "even")
    await world.registry.register(_spec("b", total=6400), (32, 32), "even")
    for job in ("a", "b"):
        await world.registry.join(job, 0, "replica")
    world.metrics = {"a": _metrics(3200), "b": _metrics(6400)}
    await world.loop.tick()
    world.state.expire_lease()  # the replica serving both jobs' streams died; nobody reconnects
    await world.registry.wait_seen(world.state.revision)
    await world.loop.tick()
    assert world.life("a").active and world.life("b").active  # within the grace a trainer may come back
    world.clock.now += 6.0
    await world.loop.tick()
    assert world.life("a").phase is Phase.FAILED and "3200 of 6400" in world.life("a").reason
    assert world.life("b").phase is Phase.FINISHED  # its work was done: the close was lost, not the job


async def test_job_rm_ends_an_active_job_as_removed_and_purges_an_ended_record(world: _World) -> None:
    await world.registry.register(_spec("a"), (32, 32), "even")
    res = await world.servicer.RemoveJob(pb.RemoveJobRequest(job_id="a"), None)
    assert res.previous_state == pb.JOB_STATE_QUEUED and not res.purged
    assert (await world.listed(include_finished=True))["a"].state == pb.JOB_STATE_REMOVED
    res = await world.servicer.RemoveJob(pb.RemoveJobRequest(job_id="a"), None)
    assert res.previous_state == pb.JOB_STATE_REMOVED and res.purged
    assert await world.listed(include_finished=True) == {}
    assert not [k for k in world.state.data if "/a/" in k]


async def test_the_retention_rule_purges_old_and_surplus_ended_records(world: _World) -> None:
    world.loop._housekeeper._settings = LifeSettings(5.0, Retention(keep_s=100.0, keep_max=2))
    for job in ("a", "b", "c", "d"):
        await world.registry.register(_spec(job), (32, 32), "even")
    await world.registry.end("a", Phase.FINISHED, "", 0, 0.0)
    world.clock.now += 200.0  # "a" ended 200 s ago: past keep_s
    for job in ("b", "c", "d"):
        await world.registry.end(job, Phase.FINISHED, "", 0, 0.0)
        world.clock.now += 1.0
    await world.loop.tick()
    assert sorted(await world.listed(include_finished=True)) == ["c", "d"]  # "a" too old, "b" beyond the newest 2


def test_retention_and_final_slowdown_rules() -> None:
    life = new_life(0.0, 1)
    lives = {f"j{i}": ended(life, Phase.FINISHED, float(i), "", 0, 0.0) for i in range(5)}
    assert to_purge(lives, 10.0, Retention(keep_s=7.5, keep_max=10)) == ["j0", "j1", "j2"]
    assert to_purge(lives, 10.0, Retention(keep_s=100.0, keep_max=2)) == ["j0", "j1", "j2"]
    assert to_purge({"active": life}, 1e9, Retention(0.0, 0)) == []
    assert final_slowdown(50.0, 100, 1.0) == 1.0  # below 1 is impossible by definition
    assert final_slowdown(300.0, 100, 1.0) == 3.0 and final_slowdown(300.0, 0, 1.0) == 0.0


async def test_a_running_job_lists_when_its_last_step_was_heard(world: _World) -> None:
    await world.registry.register(_spec("a", total=6400), (32, 32), "even")
    await world.registry.join("a", 0, "replica")
    assert (await world.listed())["a"].last_step_unix_s == 0  # no figures yet
    world.metrics = {"a": JobMetrics(64.0, 640, 990.0, {0: RankMetrics(0.001, 0.001, 9)}, 995.5)}
    await world.loop.tick()
    assert (await world.listed())["a"].last_step_unix_s == 995.5  # what `gpufair jobs` reads a stall from


async def test_a_registration_starts_the_next_round_at_once(world: _World) -> None:
    # Under the default 5 s period a short job placed ahead of a long one ran beside it
    # at a quarter of its speed until the next round held the long one.
    assert not world.loop._woken.is_set()
    spec = pb.JobSpec(job_id="short", model="resnet", global_batch=16, total_samples=1024,
                      ranks=[pb.RankPlacement(rank=0, node="n1", device_id="g0")])
    await world.servicer.RegisterJob(pb.RegisterJobRequest(spec=spec), None)
    assert world.loop._woken.is_set()
