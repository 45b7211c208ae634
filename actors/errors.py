"""The actor system's exceptions. The tree is drawn in :mod:`actors` (``actors/__init__.py``)."""

from __future__ import annotations


class ActorsError(Exception):
    """Base of every error the actor system reports to a caller on purpose."""


class InvalidCommand(ActorsError):
    """A command's input is bad (empty message, over the size cap, bad id); names the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class NotFound(ActorsError):
    """A command names something that does not exist."""


class UnknownSession(NotFound):
    """No session has that id or key."""


class UnknownRun(NotFound):
    """No run has that id."""


class UnknownApproval(NotFound):
    """No approval has that id."""


class Conflict(ActorsError):
    """The command is valid but the current state refuses it."""


class SessionKeyTaken(Conflict):
    """Another session already uses that ``session_key``."""


class ApprovalAlreadyResolved(Conflict):
    """The approval was already decided (or timed out); the later decision changes nothing."""


class RunNotActive(Conflict):
    """The run already ended; it cannot be cancelled or resumed."""


class GrantNotActive(Conflict):
    """The principal holds no ``always`` grant for that tool (never granted, or revoked)."""


class UnknownCheckpoint(NotFound):
    """No workspace checkpoint has that id."""


class CheckpointUnrestorable(Conflict):
    """A workspace restore cannot be done: a version it needs is gone from the checkpoint
    store (pruned or deleted), or the workspace refuses the write (a symlink on the path)."""


class NodeDraining(ActorsError):
    """The node is shutting down and accepts no new work."""


class IllegalTransition(ActorsError):
    """A run state change the state machine forbids: always a bug, never user input."""


class BudgetExceeded(ActorsError):
    """A hard budget (``[budgets.<name>]``, docs/usage.md) refuses the run; ``budget`` names it.
    The refusal is on the journal (``budget.refused``) before the caller hears it."""

    def __init__(self, budget: str, message: str) -> None:
        super().__init__(message)
        self.budget = budget
