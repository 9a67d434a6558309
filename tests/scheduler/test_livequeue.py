"""The live queue and the shares trainers get after a round (pure)."""

from __future__ import annotations

from gpufair.scheduler.fleetview import STARTUP_GRACE_S, Fleet, build_fleet
from gpufair.scheduler.lifecycle import JobLife, Phase
from gpufair.scheduler.jobindex import JobView
from gpufair.scheduler.jobs import JobSpec, Placement, Split
from gpufair.scheduler.livequeue import live_shares, queue_entries
from gpufair.scheduler.policy.fleet import UNKNOWN_ALONE_S, FleetJob, Gpu, RoundPlan
from gpufair.scheduler.policy.types import ClusterState
from gpufair.scheduler.submissions import Submission

NOW = 1_000.0


def _job(name: str, gpus: tuple[str, ...] = (), n: int = 1) -> FleetJob:
    return FleetJob(name, n, 32 * n, NOW - 10, 3_200.0, 32.0, 0.03, gpus=gpus)


def _fleet(*jobs: FleetJob, starting: frozenset[str] = frozenset()) -> Fleet:
    gpus = sorted({d for j in jobs for d in j.gpus})
    return Fleet(tuple(jobs), tuple(Gpu(d) for d in gpus), {}, starting)


def test_a_job_held_only_for_a_starting_job_keeps_its_gpu_until_that_job_registers() -> None:
    fleet = _fleet(_job("old", ("g0",)), _job("new", ("g0",)), starting=frozenset({"new"}))
    plan = RoundPlan(shares={"old": (0.0,), "new": (1.0,)})
    shares = live_shares(plan, fleet)
    assert shares == {"old": (1.0,)}  # the starting job gets its split when it registers
    assert queue_entries(plan, fleet, NOW, shares) == {}


def test_a_job_held_for_a_registered_job_stays_held_and_says_for_whom() -> None:
    fleet = _fleet(_job("old", ("g0",)), _job("short", ("g0",)))
    plan = RoundPlan(shares={"old": (0.0,), "short": (1.0,)}, priority={"short": 0, "old": 1})
    shares = live_shares(plan, fleet)
    assert shares == {"old": (0.0,), "short": (1.0,)}
    entries = queue_entries(plan, fleet, NOW, shares)
    assert list(entries) == ["old"] and "short" in entries["old"].reason
    assert entries["old"].waited_s == 10.0 and not entries["old"].submitted


def test_a_job_admitted_this_round_counts_as_starting_on_the_gpus_it_got() -> None:
    fleet = _fleet(_job("old", ("g0", "g1"), n=2), _job("sub"))
    plan = RoundPlan(admitted={"sub": ("g1",)}, shares={"old": (1.0, 0.0), "sub": (1.0,)})
    assert live_shares(plan, fleet) == {"old": (1.0, 0.0)}  # paced, not held: unchanged
    plan = RoundPlan(admitted={"sub": ("g1",)}, shares={"old": (0.0, 0.0), "sub": (1.0,)})
    assert live_shares(plan, fleet) == {"old": (1.0, 1.0)}


def test_a_lender_runs_unpaced_while_its_borrower_stays_paced() -> None:
    fleet = _fleet(_job("short", ("g0",)), _job("long", ("g0", "g1"), n=2))
    plan = RoundPlan(shares={"short": (0.8,), "long": (0.2, 1.0)}, unpaced=frozenset({"short"}))
    assert live_shares(plan, fleet) == {"short": (1.0,), "long": (0.2, 1.0)}


def test_a_job_held_for_both_a_starting_and_a_registered_job_stays_held() -> None:
    fleet = _fleet(_job("old", ("g0", "g1"), n=2), _job("new", ("g0",)), _job("run", ("g1",)),
                   starting=frozenset({"new"}))
    plan = RoundPlan(shares={"old": (0.0, 0.0), "new": (1.0,), "run": (1.0,)})
    assert live_shares(plan, fleet)["old"] == (0.0, 0.0)


def test_a_placed_submissions_clock_stands_still_until_its_trainers_register() -> None:
    """Its queue wait counts towards its slow-down, its start-up does not."""
    waiting = Submission("w", 1, "n", ("g0", "g1"), global_batch=8, total_samples=800, exclusive_rate=8.0,
                         submitted_unix_s=NOW - 30)
    placed = Submission("p", 1, "n", ("g0", "g1"), global_batch=8, total_samples=800, exclusive_rate=8.0,
                        submitted_unix_s=NOW - 30, placed=("g1",), placed_unix_s=NOW - 20)
    fleet = build_fleet([], {}, ClusterState(()), [waiting, placed], NOW)
    jobs = {j.job: j for j in fleet.jobs}
    assert jobs["w"].arrival_s == NOW - 30 and jobs["w"].waiting and set(fleet.submissions) == {"w"}
    assert jobs["p"].arrival_s == NOW - 10 and jobs["p"].gpus == ("g1",) and fleet.starting == {"p"}


def test_a_job_held_for_a_registered_job_that_has_not_stepped_yet_keeps_running() -> None:
    fleet = Fleet((_job("old", ("g0",)), _job("new", ("g0",))), (Gpu("g0"),), {}, frozenset(), frozenset({"new"}))
    plan = RoundPlan(shares={"old": (0.0,), "new": (1.0,)})
    assert live_shares(plan, fleet) == {"old": (1.0,), "new": (1.0,)}  # `new` gets its share, `old` runs meanwhile


def test_starting_jobs_are_not_ready_and_a_job_held_before_its_first_step_is() -> None:
    """Placed submissions and registered jobs let run but not stepping yet cannot use
    GPU time (the round gives it to others); a job held before its first step waits
    for the round's time, so it must stay in the running."""
    placed = Submission("p", 1, "n", ("g1",), global_batch=8, total_samples=800, exclusive_rate=8.0,
                        submitted_unix_s=NOW - 30, placed=("g1",), placed_unix_s=NOW - 20)
    spec = lambda name: JobSpec(name, "m", 8, 800, (Placement(0, "n", "g0"),), 8.0)  # noqa: E731
    long_ago = NOW - 2 * STARTUP_GRACE_S
    let_run = JobView(spec("run"), Split(1, 0, (8,), "x", "", long_ago), None, 1, JobLife(1, Phase.RUNNING, long_ago))
    held = JobView(spec("held"), Split(1, 0, (8,), "x", "", NOW, shares=(0.0,)), None, 1,
                   JobLife(1, Phase.RUNNING, long_ago))
    just = JobView(spec("just"), Split(1, 0, (8,), "x", "", NOW - 1), None, 1,
                   JobLife(1, Phase.RUNNING, NOW - STARTUP_GRACE_S / 2))
    released = JobView(spec("released"), Split(2, 0, (8,), "x", "", NOW - 1), None, 1,
                       JobLife(1, Phase.RUNNING, long_ago))
    fleet = build_fleet([let_run, held, just, released], {}, ClusterState(()), [placed], NOW)
    # Registered, or released from a hold, a moment ago: about to step, so it gets its
    # time (and holds others) at once.
    assert {j.job: j.ready for j in fleet.jobs} == {"run": False, "held": True, "just": True, "released": True,
                                                    "p": False}
    assert fleet.unstarted == {"run", "held"}


def test_a_submission_of_unknown_length_counts_an_hour_as_a_stand_in_not_a_known_length() -> None:
    known = Submission("k", 1, "n", ("g0",), global_batch=8, total_samples=800, exclusive_rate=8.0,
                       submitted_unix_s=NOW)
    unknown = Submission("u", 1, "n", ("g0",), global_batch=8, submitted_unix_s=NOW)
    no_speed = Submission("s", 1, "n", ("g0",), global_batch=8, total_samples=800, submitted_unix_s=NOW)
    jobs = {j.job: j for j in build_fleet([], {}, ClusterState(()), [known, unknown, no_speed], NOW).jobs}
    assert jobs["k"].length_known and jobs["k"].alone_s() == 100.0
    assert not jobs["u"].length_known and jobs["u"].alone_s() == UNKNOWN_ALONE_S
    assert not jobs["s"].length_known
