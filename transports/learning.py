"""A node's learning: the view, the desk, reflection, and how they plug into the node
(docs/learning.md). The composition root (:mod:`transports.runtime`) builds one
:class:`NodeLearning`; the HTTP API reviews through its desk and reads its view.

- The view (:class:`projections.LearningView`) is the node's ``LearningPort``: runs are offered
  the applied preferences of their principal and the procedure hints for their request.
- The desk (:class:`actors.learning.desk.LearningDesk`) writes ``learning/<id>``; an applied fact
  becomes a memory item through :func:`actors.memory.items.submit_item` (source ``learned``,
  scope ``principal`` of the principal the fact concerns), a rollback deletes it through
  :func:`actors.memory.items.delete_item`.
- Reflection (:class:`actors.learning.desk.Reflector`) is the ``post_run_reflection`` handler of
  the node's task queue, and the feed (:class:`actors.learning.reflection.ReflectionFeed`) enqueues
  the completed runs' reflections (in batches with the rules) while ``[learning] enabled``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pykka

from actors import Node
from actors.learning.desk import TASK_KIND, LearningDesk, LearningSettings, Reflector
from actors.learning.reflection import ReflectionFeed
from actors.memory.items import (
    MemoryItemAlreadyDeleted,
    UnknownMemoryItem,
    delete_item,
    submit_item,
)
from events import ConcurrencyConflict, JournalPort, StoredEvent
from projections import LearningView, Projector
from projections.learning import Offered
from projections.pool import ReaderLimits

HANDLER_SLACK_S = 30.0
"""A reflection's deadline is the model's time-out plus this (reading, recording)."""


class LearnedMemory:
    """:class:`actors.learning.desk.FactMemory` over the node's one memory writer."""

    def __init__(self, journal: JournalPort) -> None:
        self.journal = journal

    def remember(
        self, text: str, *, owner: str, item_id: str, candidate_id: str
    ) -> Callable[[], None]:
        """The item is appended as ``owner``'s, whose item it is (the memory writer records
        the writer as the owner); ``causation_id`` names the candidate, whose
        ``learning.candidate_applied`` says who applied it. Queued: the returned wait
        returns once it is durable."""
        written = submit_item(
            self.journal,
            item_id,
            text,
            principal=owner,
            source="learned",
            causation_id=candidate_id,
        )

        def wait() -> None:
            with contextlib.suppress(ConcurrencyConflict):  # written by an earlier attempt
                written()

        return wait

    def forget(self, item_id: str, *, by: str, reason: str, candidate_id: str) -> None:
        with contextlib.suppress(UnknownMemoryItem, MemoryItemAlreadyDeleted):
            delete_item(
                self.journal,
                item_id,
                principal=by,
                reason=reason or f"learning candidate {candidate_id} rolled back",
                causation_id=candidate_id,
            )


class RunLearning:
    """:class:`actors.services.LearningPort` over the learning view, read after the views'
    start-up catch-up: a preference learned before a restart is offered to every run."""

    def __init__(self, view: LearningView, projector: Projector) -> None:
        self._view = view
        self._projector = projector

    def offered(self, principal: str, text: str) -> list[Offered]:
        self._projector.wait_caught_up()
        return self._view.offered(principal, text)


class NodeLearning:
    """The learning parts of one node (see the module docstring)."""

    def __init__(
        self,
        views_path: Path,
        journal: JournalPort,
        projector: Projector,
        settings: LearningSettings,
        limits: ReaderLimits | None = None,
    ) -> None:
        self.settings = settings
        self.view = LearningView(views_path, wait_for=projector.wait_for, limits=limits)
        self._projector = projector
        self.desk = LearningDesk(journal, settings, LearnedMemory(journal))
        self.journal = journal
        self.feed: pykka.ActorRef[Any] | None = None
        self.reflector: Reflector | None = None

    def attach(self, node: Node) -> None:
        """Before ``node.start()``: runs read the view; the queue runs reflections."""
        services = node.services
        services.learning = RunLearning(self.view, self._projector)
        self.reflector = Reflector(
            self.journal, self.desk, self.view, provider=services.provider, io=services.io
        )
        node.tasks.register(
            TASK_KIND,
            self.reflector.handle,
            timeout_s=self.settings.model_timeout_s + HANDLER_SLACK_S,
            description="learn from a completed run (docs/learning.md)",
        )

    def start(self, node: Node, mine: Callable[[StoredEvent], bool] | None = None) -> None:
        """After ``node.start()``: enqueue a reflection per completed run (when enabled);
        ``mine``: in a cluster, the runs this node reflects on (those it serves)."""
        if self.settings.enabled and self.feed is None:
            # A model reflects on each run in a task of its own (its answer costs far more
            # than the task); the rules take the runs of a batch window together.
            model = self.reflector is not None and self.reflector.extractor == "model"
            self.feed = ReflectionFeed.start(
                self.journal,
                node.tasks,
                node.io,
                batch_s=0.0 if model else self.settings.batch_s,
                max_attempts=self.settings.max_attempts,
                mine=mine,
            )

    def stop(self) -> None:
        """Stop enqueueing (before the node drains); idempotent."""
        feed, self.feed = self.feed, None
        if feed is not None:
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                feed.stop(block=True, timeout=10)

    def close(self) -> None:
        self.stop()
        self.view.close()
