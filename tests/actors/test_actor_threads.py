"""Actors on kept threads (actors/actor_threads.py): a stopped actor's thread runs the next
actor's loop as a fresh thread would, and the pool keeps only a few waiting."""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest

from actors.actor_threads import IDLE_KEEP, PooledActor, idle_actor_threads

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("MARK", default="unset")


class Probe(PooledActor):
    """Tells what its thread looks like from inside, and leaves a mark in its context."""

    def on_receive(self, message: Any) -> Any:
        if message == "mark":
            MARK.set("left by an earlier actor")
        me = threading.current_thread()
        return me.ident, me.name, me.daemon, MARK.get()


class Failing(PooledActor):
    def on_start(self) -> None:
        raise RuntimeError("on_start fails")


def wait_until(check: Callable[[], bool], what: str, limit_s: float = 10.0) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {limit_s} s for {what}")
        time.sleep(0.005)


Look = tuple[int, str, bool, str]


def look(ref: pykka.ActorRef[Any], message: str = "look") -> Look:
    """The probe's thread id, thread name, daemon flag and the mark in its context."""
    answer: Look = ref.ask(message, block=True)
    return answer


def idle_names() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "actor-idle"]


@pytest.fixture(autouse=True)
def _stop_probes() -> Iterator[None]:
    yield
    for ref in pykka.ActorRegistry.get_by_class(Probe):
        ref.stop()


def test_the_next_actor_runs_on_a_stopped_actors_thread_as_on_a_fresh_one() -> None:
    first = Probe.start()
    ident, name, daemon, _ = look(first, "mark")
    assert name.startswith("Probe-") and daemon
    first.stop()
    wait_until(lambda: idle_actor_threads() >= 1, "the thread to wait for the next actor")
    assert "actor-idle" in idle_names()

    seen = [Probe.start() for _ in range(IDLE_KEEP)]
    answers = [look(ref) for ref in seen]
    assert ident in {a[0] for a in answers}, "no actor ran on the stopped actor's thread"
    for _, name, daemon, mark in answers:
        assert name.startswith("Probe-") and name != "actor-idle" and daemon
        assert mark == "unset", "a context variable outlived the actor that set it"
    assert len({a[1] for a in answers}) == len(answers)  # each actor has a name of its own


def test_a_burst_leaves_no_more_than_the_kept_threads_waiting() -> None:
    before = threading.active_count()
    burst = [Probe.start() for _ in range(IDLE_KEEP + 6)]
    assert len({look(ref)[0] for ref in burst}) == len(burst)  # all live at once
    for ref in burst:
        ref.stop()
    wait_until(lambda: idle_actor_threads() == IDLE_KEEP, "the burst's threads to settle")
    wait_until(lambda: threading.active_count() <= before + IDLE_KEEP, "the rest to end")
    assert len(idle_names()) == IDLE_KEEP


def test_an_actor_that_fails_to_start_leaves_its_thread_to_the_next() -> None:
    failing = Failing.start()
    wait_until(lambda: not failing.is_alive(), "the failing actor to stop")
    probe = Probe.start()
    assert look(probe)[1].startswith("Probe-")


def test_a_forked_child_runs_its_actors_on_threads_of_its_own() -> None:
    """The parent's waiting threads do not exist in a child: it must not hand them actors."""
    first = Probe.start()
    look(first)
    first.stop()
    wait_until(lambda: idle_actor_threads() >= 1, "a thread to wait for the next actor")
    pid = os.fork()
    if pid == 0:  # the child: answer within 5 s or fail
        try:
            child = Probe.start()
            answered = child.ask("look", block=True, timeout=5)[1].startswith("Probe-")
            os._exit(0 if answered else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
