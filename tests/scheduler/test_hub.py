"""CommandHub: every open stream of a job gets its splits; a slow stream keeps the newest; a removed job ends them."""

from __future__ import annotations

from gpufair.scheduler.hub import CommandHub
from gpufair.scheduler.jobs import Split


def _split(version: int) -> Split:
    return Split(version, 0, (8, 8), "even", "", 0.0)


async def test_every_subscriber_of_a_job_gets_its_splits_and_only_its_own() -> None:
    hub = CommandHub()
    a1, a2, b = hub.subscribe("a"), hub.subscribe("a"), hub.subscribe("b")
    hub.publish("a", _split(1))
    assert (await a1.get()).version == 1 and (await a2.get()).version == 1
    assert b.empty()


async def test_a_full_queue_drops_the_oldest_and_keeps_the_newest() -> None:
    hub = CommandHub(queue_size=2)
    q = hub.subscribe("a")
    for v in range(1, 6):
        hub.publish("a", _split(v))
    assert [(await q.get()).version for _ in range(q.qsize())] == [4, 5]


async def test_close_ends_the_streams_even_when_their_queues_are_full() -> None:
    hub = CommandHub(queue_size=1)
    q = hub.subscribe("a")
    hub.publish("a", _split(1))
    hub.close("a")
    assert await q.get() is None


async def test_unsubscribed_queues_get_nothing_and_publishing_to_nobody_is_fine() -> None:
    hub = CommandHub()
    q = hub.subscribe("a")
    hub.unsubscribe("a", q)
    hub.publish("a", _split(1))
    hub.close("a")
    hub.publish("nobody", _split(1))
    assert q.empty()
