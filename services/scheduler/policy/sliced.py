"""Admission and placement when GPUs are time-sliced: every resident job
runs, so a job is admitted whenever GPUs with room exist, onto the set its
placement rule picks. Under `sd` placement that is the set with the
smallest predicted slow-down among the jobs it touches: its own SD,
time-slicing n+1 ways at the measured interference, and its new
neighbours' SD once they share with one more job (their speed falls by
n/(n+1)). Both depend only on the GPU, so the `need` GPUs with the smallest
such score minimise the largest (`placement.py`)."""

from __future__ import annotations

import numpy as np

from gpufair.scheduler.policy.board import Board
from gpufair.scheduler.policy.fleet import RoundPlan
from gpufair.scheduler.policy.placement import choose


def _outlook(board: Board, g: int) -> tuple[float, float, float]:
    """GPU g: (seconds until a residency slot frees, the largest SD of its
    residents if one more job joined, seconds until it empties). A
    resident's end is predicted at its current speed (measured, else
    exclusive over the jobs sharing the GPU)."""
    there = board.residents[g]
    n = len(there)
    if not n:
        return 0.0, 0.0, 0.0
    lefts, worst = [], 0.0
    for k in there:
        j = board.jobs[k]
        rate = j.rate if j.rate else j.exclusive_rate / n
        left = max(j.samples_total - j.samples_done, 0.0) / rate
        lefts.append(left)
        worst = max(worst, (board.now - j.arrival_s + left * (n + 1) / n) / j.alone_s())
    return (min(lefts) if n >= board.levers.max_per_gpu else 0.0), worst, max(lefts)


def sliced_round(board: Board) -> RoundPlan:
    """Admit and place waiting jobs, most urgent first (module docstring)."""
    n_gpu = len(board.gpus)
    outlook = [_outlook(board, g) for g in range(n_gpu)]
    free_at, after, empty_at = (np.array([o[k] for o in outlook]) for k in range(3))
    for i in board.order:
        job = board.jobs[i]
        if not job.waiting or board.behind(job):
            continue
        # Onto reserved GPUs only if done before the reservation can start,
        # its speed predicted as exclusive over the jobs it would share with.
        share_n = board.count.max() + 1
        room = board.room(job) & board.backfill(job.remaining_s() * share_n)
        score = None
        if board.levers.placement == "sd":
            score = np.zeros(n_gpu)
            for g in np.flatnonzero(room):
                n = board.count[g] + 1
                models = list(board.models[g])
                eta = board.interference.efficiency(job.model, models) if models else 1.0
                mine = (board.now - job.arrival_s + job.remaining_s() * n / eta) / job.alone_s()
                score[g] = max(mine, after[g])
        got = choose(board.levers.placement, job.num_gpus, np.flatnonzero(room), board.count,
                     board.rng, score, board.node, board.cached(job))
        if got is None:
            board.wait(job, free_at, "no room", empty_at)
            continue
        board.admit(i, got)
        for g in got:
            free_at[g], after[g], empty_at[g] = _outlook(board, g)
    return board.plan()
