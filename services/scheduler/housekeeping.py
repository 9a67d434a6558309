"""The leader's care of job lives, once per period: jobs whose ranks all left
without closing their session end, queued jobs with a live rank start, and
ended records past the retention rule are purged."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from gpufair.scheduler.figures import FigureBoard
from gpufair.scheduler.jobindex import JobView
from gpufair.scheduler.lifecycle import Phase, Retention, lost, to_purge
from gpufair.scheduler.registry import JobRegistry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LifeSettings:
    """`lost_s`: how long a running job may have no live rank before it ends
    (a trainer that reconnects within it keeps the job running); `retention`:
    how long ended records stay listed."""

    lost_s: float = 30.0
    retention: Retention = Retention()


class Housekeeper:
    def __init__(self, registry: JobRegistry, board: FigureBoard, settings: LifeSettings, clock: Callable[[], float]) -> None:
        self._registry, self._board, self._settings, self._clock = registry, board, settings, clock
        self._empty_since: dict[str, float] = {}  # running job -> when its last rank left (leader memory only)

    async def sweep(self, views: list[JobView]) -> None:
        now = self._clock()
        for view in views:
            if view.life is not None and view.life.phase is Phase.QUEUED and view.live_ranks > 0:
                await self._registry.mark_started(view.spec.job_id)  # a join whose own write was lost
        running = [(v.spec.job_id, v.live_ranks) for v in views if v.life is not None and v.life.phase is Phase.RUNNING]
        by_id = {v.spec.job_id: v for v in views}
        for job in lost(running, self._empty_since, now, self._settings.lost_s):
            await self._end_lost(by_id[job])
        lives = {v.spec.job_id: v.life for v in views if v.life is not None}
        for job in to_purge(lives, now, self._settings.retention):
            logger.info("purging the record of %s (ended %s; retention rule)", job, lives[job].phase.value)
            await self._registry.purge(job)

    async def _end_lost(self, view: JobView) -> None:
        job = view.spec.job_id
        figures = self._board.get(job)
        samples = figures.estimate.samples_done if figures else 0
        exclusive = figures.estimate.exclusive_rate if figures else view.spec.exclusive_rate
        done = samples >= view.spec.total_samples
        phase = Phase.FINISHED if done else Phase.FAILED
        why = (f"every rank left without closing its session for {self._settings.lost_s:g}s"
               + ("; its work was done" if done else f" at {samples} of {view.spec.total_samples} samples"))
        if await self._registry.end(job, phase, why, samples, exclusive) is not None:
            logger.warning("job %s ended as %s: %s", job, phase.value, why)
        self._empty_since.pop(job, None)
