"""Jobs as the scheduler's API shows them: domain values -> protobuf (pure).

A job's summary joins its registry view (spec, split, pin, live ranks, life
from etcd) with its figures (rate, progress, slow-down from the latest
refresh). `Summaries` keeps each job's summary, as a message and as its
encoded bytes inside a ListJobsResponse, until its view or figures change,
and rebuilds them after each refresh, off the call path: a ListJobs of 4,000
jobs then joins ready bytes and parses them once (3 ms) instead of building
or copying 4,000 messages (7-12 ms).
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.scheduler.figures import FigureBoard, Figures
from gpufair.scheduler.jobindex import JobView
from gpufair.scheduler.jobs import JobSpec, Placement, Split, validate_spec
from gpufair.scheduler.lifecycle import JobLife, Phase
from gpufair.scheduler.livequeue import LiveQueueEntry
from gpufair.scheduler.submissions import Submission

STATE = {Phase.QUEUED: pb.JOB_STATE_QUEUED, Phase.RUNNING: pb.JOB_STATE_RUNNING, Phase.FINISHED: pb.JOB_STATE_FINISHED,
         Phase.FAILED: pb.JOB_STATE_FAILED, Phase.REMOVED: pb.JOB_STATE_REMOVED}


def spec_from_pb(s: pb.JobSpec) -> JobSpec:
    ranks = tuple(Placement(r.rank, r.node, r.device_id, r.device_type, r.max_batch) for r in s.ranks)
    return validate_spec(JobSpec(s.job_id, s.model, s.global_batch, s.total_samples, ranks, s.exclusive_samples_per_s, s.weight or 1.0))


def spec_to_pb(s: JobSpec) -> pb.JobSpec:
    return pb.JobSpec(job_id=s.job_id, model=s.model, global_batch=s.global_batch, total_samples=s.total_samples,
                      exclusive_samples_per_s=s.exclusive_rate, weight=s.weight,
                      ranks=[pb.RankPlacement(rank=r.rank, node=r.node, device_id=r.device_id, device_type=r.device_type, max_batch=r.max_batch) for r in s.ranks])


def split_number(s: Split, life: JobLife | None) -> int:
    """The split's place in the job's life (1 = the split at registration); 0 if unknown."""
    if life is None or not life.first_split_version or s.version < life.first_split_version:
        return 0
    return s.version - life.first_split_version + 1


def split_to_pb(job: str, s: Split, life: JobLife | None = None) -> pb.SplitCommand:
    return pb.SplitCommand(job_id=job, version=s.version, apply_step=s.apply_step, batch_sizes=list(s.batch_sizes), policy=s.policy,
                           reason=s.reason, issued_unix_s=s.issued_unix_s, number=split_number(s, life), shares=list(s.shares))


def state_of(view: JobView) -> int:
    if view.life is not None:
        return STATE[view.life.phase]
    return pb.JOB_STATE_RUNNING if view.live_ranks else pb.JOB_STATE_QUEUED  # recorded before lives were


def fill_summary(out: pb.JobSummary, view: JobView, figures: Figures | None) -> pb.JobSummary:
    """`out` filled with the job's summary."""
    spec, life = view.spec, view.life
    out.spec.CopyFrom(spec_to_pb(spec))
    out.state, out.pinned, out.live_ranks = state_of(view), view.pinned is not None, view.live_ranks
    if view.split:
        out.split.CopyFrom(split_to_pb(spec.job_id, view.split, life))
    if life is not None:
        out.registered_unix_s, out.started_unix_s, out.ended_unix_s = life.registered_unix_s, life.started_unix_s, life.ended_unix_s
        out.state_reason = life.reason
    if life is not None and not life.active:
        # An ended job shows its final figures, recorded in etcd when it ended.
        out.samples_done, out.progress = life.samples_done, min(life.samples_done / spec.total_samples, 1.0)
        out.elapsed_s, out.slowdown, out.figures_unix_s = life.jct_s, life.slowdown, life.ended_unix_s
        out.exclusive_samples_per_s = life.exclusive_rate
        out.exclusive_source = "spec" if spec.exclusive_rate > 0 else ("recorded" if life.exclusive_rate > 0 else "unknown")
    elif figures is not None:
        e = figures.estimate
        out.samples_per_s, out.exclusive_samples_per_s, out.slowdown = e.rate, e.exclusive_rate, e.slowdown
        out.progress, out.elapsed_s, out.exclusive_source = e.progress, e.elapsed_s, e.exclusive_source
        out.samples_done, out.stale, out.figures_unix_s = e.samples_done, figures.stale, figures.at_unix_s
        out.last_step_unix_s = e.last_step_unix_s
    return out


def _listed(summary: pb.JobSummary) -> bytes:
    """`summary` encoded as one element of ListJobsResponse.jobs (tag, length, message)."""
    body = summary.SerializeToString()
    n, length = len(body), bytearray()
    while n > 0x7F:
        length.append((n & 0x7F) | 0x80)
        n >>= 7
    length.append(n)
    return _JOBS_TAG + bytes(length) + body


_JOBS_TAG = bytes([pb.ListJobsResponse.DESCRIPTOR.fields_by_name["jobs"].number << 3 | 2])  # length-delimited


class Summaries:
    """Each job's protobuf summary, rebuilt only when its view or its figures change."""

    def __init__(self, board: FigureBoard) -> None:
        self._board = board
        self._cache: dict[str, tuple[JobView, Figures | None, pb.JobSummary, bytes]] = {}

    def _hit(self, view: JobView) -> tuple[JobView, Figures | None, pb.JobSummary, bytes]:
        job = view.spec.job_id
        figures = self._board.get(job)
        hit = self._cache.get(job)
        if hit is None or hit[0] is not view or hit[1] is not figures:
            summary = fill_summary(pb.JobSummary(), view, figures)
            hit = self._cache[job] = (view, figures, summary, _listed(summary))
        return hit

    def of(self, view: JobView) -> pb.JobSummary:
        return self._hit(view)[2]

    def listing(self, views: Iterable[JobView]) -> pb.ListJobsResponse:
        """The ListJobsResponse of `views`, in their order."""
        hit = self._hit
        return pb.ListJobsResponse.FromString(b"".join([hit(v)[3] for v in views]))

    def rebuild(self, views: Iterable[JobView]) -> None:
        """Bring every job's summary up to date and forget jobs that are gone (after a refresh)."""
        views = list(views)
        for view in views:
            self._hit(view)
        if len(self._cache) > len(views):
            ids = {v.spec.job_id for v in views}
            self._cache = {j: hit for j, hit in self._cache.items() if j in ids}


def submission_from_pb(m: pb.Submission, now: float) -> Submission:
    """A submission as received (validated when stored), submitted `now`."""
    return Submission(m.job_id, m.num_gpus, m.node, tuple(m.devices), m.device_type or "emulated", m.model,
                      m.global_batch, m.total_samples, m.exclusive_samples_per_s, m.dataset, now)


def submission_to_pb(s: Submission) -> pb.Submission:
    return pb.Submission(job_id=s.job_id, num_gpus=s.num_gpus, node=s.node, devices=list(s.devices),
                         device_type=s.device_type, model=s.model, global_batch=s.global_batch,
                         total_samples=s.total_samples, exclusive_samples_per_s=s.exclusive_rate,
                         dataset=s.dataset, submitted_unix_s=s.submitted_unix_s, placed_devices=list(s.placed),
                         predicted_sd=s.predicted_sd, placed_why=s.placed_why)


def queue_entry_to_pb(e: LiveQueueEntry) -> pb.QueueEntry:
    start = e.predicted_start_s if e.predicted_start_s < float("inf") else -1.0
    return pb.QueueEntry(job_id=e.job, position=e.position, predicted_start_s=start, waited_s=e.waited_s,
                         reason=e.reason, submitted=e.submitted)
