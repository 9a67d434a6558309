"""DecisionLoop behind the in-memory state: a leader's round re-splits jobs as the
policy says, writes each split as the next version ahead of the trainers'
step, stores a typed record any replica explains, and skips a job whose split
changed under it; reads keep working when metrics or profiles are away."""

from __future__ import annotations

import pytest

from gpufair.common.errors import Unavailable
from gpufair.common.keys import Keys
from gpufair.common.memstate import MemoryState
from gpufair.common.steptime import StepTimeModel
from gpufair.scheduler.jobs import JobSpec, Placement, Split
from gpufair.scheduler.loop import DecisionLoop
from gpufair.scheduler.policy.fleet import RoundPlan
from gpufair.scheduler.registry import JobRegistry
from gpufair.scheduler.snapshot import JobMetrics, RankMetrics
from gpufair.scheduler.sources import PolicySettings, PolicyStore

KEYS = Keys("/t")
NOW = 1_000.0


class _Leader:
    is_leader = True


def _metrics(job: str, costs: tuple[float, float], last_step: int = 50) -> JobMetrics:
    # Rank 0 costs more per sample than rank 1: "balance" moves samples to rank 1.
    return JobMetrics(samples_per_s=640.0, samples_done=3200, first_unix_s=NOW - 10.0,
                      ranks={r: RankMetrics(c, 0.001, last_step) for r, c in enumerate(costs)}, last_unix_s=NOW)


class _World:
    """A registry and a loop over one in-memory store, with metrics and profiles the test sets."""

    def __init__(self) -> None:
        self.state = MemoryState()
        self.registry = JobRegistry(self.state, KEYS)
        self.policies = PolicyStore(self.state, KEYS, PolicySettings("balance", 1.0, 0.0))
        self.metrics: dict[str, JobMetrics] | Exception = {}
        self.profiles: dict | Exception = {}
        self.loop = DecisionLoop(self.state, KEYS, self.registry, _Leader(), self.policies, self._fetch_metrics,
                                 self._fetch_profiles, clock=lambda: NOW)

    async def _fetch_metrics(self) -> dict[str, JobMetrics]:
        if isinstance(self.metrics, Exception):
            raise self.metrics
        return self.metrics

    async def _fetch_profiles(self) -> dict:
        if isinstance(self.profiles, Exception):
            raise self.profiles
        return self.profiles

    async def stored_split(self, job: str) -> Split:
        return Split.from_json((await self.state.get(KEYS.job_split(job))).value)

    async def add_job(self, job: str) -> Split:
        ranks = (Placement(0, "n1", f"{job}-g0"), Placement(1, "n1", f"{job}-g1"))
        view = await self.registry.register(JobSpec(job, "resnet", 64, 64_000, ranks), (32, 32), "balance")
        await self.registry.join(job, 0, "replica")
        await self.registry.join(job, 1, "replica")
        return view.split


@pytest.fixture
async def world():
    w = _World()
    w.registry.start_background()
    assert await w.registry.wait_ready(2)
    yield w
    await w.registry.stop()


async def test_a_round_resplits_jobs_as_the_policy_says_and_records_why(world: _World) -> None:
    before = {job: await world.add_job(job) for job in ("a", "b")}
    await world.registry.wait_seen(world.state.revision)
    world.metrics = {"a": _metrics("a", (0.002, 0.001)), "b": _metrics("b", (0.001, 0.001))}
    result = await world.loop.run_round()
    split_a = await world.stored_split("a")
    assert split_a.version == before["a"].version + 1 and split_a.policy == "balance"
    assert sum(split_a.batch_sizes) == 64 and split_a.batch_sizes[1] > split_a.batch_sizes[0]
    assert split_a.apply_step == 0  # the ranks apply it at their next agreement
    assert await world.stored_split("b") == before["b"]  # already balanced: untouched
    assert result.written == 1
    record = await world.loop.last_decision()
    assert record == result.record and record.policy == "balance"
    parts = {j.job_id: j for j in record.jobs}
    assert parts["a"].changed and parts["a"].old == (32, 32) and parts["a"].new == split_a.batch_sizes
    assert not parts["b"].changed and "1 re-split" in record.summary


async def test_a_held_job_gets_its_new_split_at_the_step_it_holds_at(world: _World) -> None:
    """A held job draws no batch: a re-split applies where it stands (step 0: its next
    agreement), not ahead of its last reported step, which it would never reach. An
    unpaced policy (here `balance`, after a paced one held the job) releases it."""
    split = await world.add_job("a")
    await world.registry.write_split("a", Split(split.version + 1, 0, (32, 32), "balance", "queued", NOW, 1.0, (0.0, 0.0)))
    await world.registry.wait_seen(world.state.revision)
    world.metrics = {"a": _metrics("a", (0.002, 0.001))}
    await world.loop.run_round()
    moved = await world.stored_split("a")
    assert moved.version == split.version + 2 and moved.batch_sizes[1] > moved.batch_sizes[0]
    assert moved.apply_step == 0 and moved.shares == ()


async def test_a_job_whose_split_changed_meanwhile_is_skipped_not_overwritten(world: _World) -> None:
    split = await world.add_job("a")
    world.metrics = {"a": _metrics("a", (0.002, 0.001))}
    await world.registry.wait_seen(world.state.revision)

    # An operator's pin lands between the round's read of the split and its write.
    original = world.registry.write_split

    async def pinned_first(job: str, new: Split) -> int:
        await original(job, Split(new.version, 0, (40, 24), "manual", "pinned", NOW))
        return await original(job, new)

    world.registry.write_split = pinned_first  # type: ignore[method-assign]
    result = await world.loop.run_round()
    assert result.written == 0 and not result.record.jobs[0].changed
    stored = await world.state.get(KEYS.job_split("a"))
    assert stored.value["batch_sizes"] == [40, 24] and stored.value["version"] == split.version + 1


async def test_admin_reads_work_without_metrics_and_with_the_last_profiles(world: _World) -> None:
    await world.add_job("a")
    await world.registry.wait_seen(world.state.revision)
    world.profiles = {("resnet", ""): StepTimeModel(0.001, 0.001)}
    world.metrics = {"a": _metrics("a", (0.002, 0.001))}
    await world.loop.refresh()
    first = world.loop.board.get("a")
    assert first.estimate.exclusive_source == "profile" and first.estimate.exclusive_rate > 0 and not first.stale
    world.metrics, world.profiles = Unavailable("metrics down"), Unavailable("etcd down")
    await world.loop.refresh()
    again = world.loop.board.get("a")
    # The last known figures stay, marked stale: the job does not fall back to "0 % done".
    assert again.stale and again.estimate.exclusive_rate == first.estimate.exclusive_rate
    assert again.estimate.rate == first.estimate.rate == 640.0 and again.estimate.samples_done == 3200


async def test_a_round_without_its_inputs_fails_and_changes_nothing(world: _World) -> None:
    await world.add_job("a")
    world.metrics = Unavailable("metrics down")
    revision = world.state.revision
    with pytest.raises(Unavailable):
        await world.loop.run_round()
    assert world.state.revision == revision and await world.loop.last_decision() is None


async def test_a_job_given_its_gpus_while_the_plan_holds_it_runs_the_even_split(world: _World) -> None:
    """A job the round held, given its GPUs' whole time because the job it was held
    for is still starting (`live_shares`), drops the split it had when it borrowed a
    sliver (8/56 ran it at 32/56 of its speed alone) for the even one."""
    split = await world.add_job("a")
    lent = Split(split.version + 1, 0, (8, 56), "sd-maxmin", "paced", NOW, 1.0, (0.14, 1.0))
    await world.registry.write_split("a", lent)
    await world.registry.wait_seen(world.state.revision)
    view = next(v for v in world.registry.views() if v.spec.job_id == "a")
    plan = RoundPlan(shares={"a": (0.0, 0.0)})
    await world.loop._pace(view, plan, (1.0, 1.0), None, PolicySettings("sd-maxmin", 1.0, 0.0), 1.0)
    now = await world.stored_split("a")
    assert now.version == lent.version + 1 and now.batch_sizes == (32, 32) and now.shares == ()


async def test_that_split_respects_a_ranks_memory_cap(world: _World) -> None:
    ranks = (Placement(0, "n1", "c-g0", max_batch=16), Placement(1, "n1", "c-g1"))
    split = (await world.registry.register(JobSpec("c", "resnet", 64, 64_000, ranks), (16, 48), "balance")).split
    await world.registry.write_split("c", Split(split.version + 1, 0, (8, 56), "sd-maxmin", "paced", NOW, 1.0, (0.1, 1.0)))
    await world.registry.wait_seen(world.state.revision)
    view = next(v for v in world.registry.views() if v.spec.job_id == "c")
    await world.loop._pace(view, RoundPlan(shares={"c": (0.0, 0.0)}), (1.0, 1.0), None,
                           PolicySettings("sd-maxmin", 1.0, 0.0), 1.0)
    assert (await world.stored_split("c")).batch_sizes == (16, 48)


async def test_a_paced_job_gets_the_split_its_shares_were_planned_with_however_small_the_move(world: _World) -> None:
    """`min_change` keeps an unpaced job's split through small moves; a paced rank's
    share is planned for its planned batch, so the two travel together: a 3-sample
    sliver paced to a 1-sample one's share would hold for three times its time."""
    split = await world.add_job("a")
    paced = Split(split.version + 1, 0, (61, 3), "sd-maxmin", "paced", NOW, 1.0, (1.0, 0.06))
    await world.registry.write_split("a", paced)
    await world.registry.wait_seen(world.state.revision)
    view = next(v for v in world.registry.views() if v.spec.job_id == "a")
    settings = PolicySettings("sd-maxmin", 1.0, 0.05)  # 2 of 64 samples moving is under it
    await world.loop._pace(view, RoundPlan(splits={"a": (63, 1)}), (1.0, 0.02), None, settings, 1.0)
    now = await world.stored_split("a")
    assert now.batch_sizes == (63, 1) and now.shares == (1.0, 0.02)
    # A sliver under the rounding is still time: 0 would hold the whole job
    # (a rank told 0 holds it, `client.splits`).
    await world.registry.wait_seen(world.state.revision)
    view = next(v for v in world.registry.views() if v.spec.job_id == "a")
    await world.loop._pace(view, RoundPlan(splits={"a": (63, 1)}), (1.0, 0.0004), None, settings, 1.0)
    sliver = await world.stored_split("a")
    assert sliver.version == now.version + 1 and sliver.shares == (1.0, 0.001) and not sliver.held
    # Unpaced, a small move is not worth a new split.
    before = await world.add_job("b")
    await world.registry.wait_seen(world.state.revision)
    view = next(v for v in world.registry.views() if v.spec.job_id == "b")
    await world.loop._pace(view, RoundPlan(splits={"b": (33, 31)}), (1.0, 1.0), None, settings, 1.0)
    assert (await world.stored_split("b")) == before
