"""Ordering the tasks of one DAG level and expanding dependencies on groups."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpufair.cache.planner.doc import Node


def topo_order(names: Sequence[str], deps: Mapping[str, Sequence[str]], at: Node) -> list[str]:
    """`names` in dependency order (stable); a cycle is a PipelineError at `at`."""
    indegree = {n: 0 for n in names}
    users: dict[str, list[str]] = {n: [] for n in names}
    for name in names:
        for dep in dict.fromkeys(deps.get(name, ())):
            indegree[name] += 1
            users[dep].append(name)
    ready = [n for n in names if indegree[n] == 0]
    order: list[str] = []
    while ready:
        name = ready.pop(0)
        order.append(name)
        for user in users[name]:
            indegree[user] -= 1
            if indegree[user] == 0:
                ready.append(user)
    if len(order) != len(names):
        stuck = sorted(n for n in names if indegree[n] > 0)
        raise at.error(f"dependency cycle among tasks {', '.join(stuck[:8])}")
    return order


def sinks(names: Sequence[str], deps: Mapping[str, Sequence[str]]) -> list[str]:
    """Tasks no sibling depends on: the ones whose end is the group's end."""
    used = {d for n in names for d in deps.get(n, ())}
    return [n for n in names if n not in used]


def expand(deps: Sequence[str], exits: Mapping[str, tuple[str, ...]], default: tuple[str, ...]) -> tuple[str, ...]:
    """Step names a task waits for: its siblings' exit steps, else `default`."""
    if not deps:
        return default
    out: dict[str, None] = {}
    for dep in deps:
        for step in exits[dep]:
            out.setdefault(step)
    return tuple(out)
