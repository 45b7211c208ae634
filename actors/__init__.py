"""reel's actors: node, session directory, sessions, runs and tool invocations (pykka).

Rules (docs/architecture.md, section 4): state is a fold of the actor's own events; a command is
handled by deciding events, appending them, then applying them; no actor blocks on another's
future (replies are messages); network I/O runs on the node's asyncio loop; blocking tool work
runs on the tool actor's own thread.

Public surface::

    from actors import Node, ActorsConfig, RunBudgets
    from actors.messages import StartRun, CancelRun, ResolveApproval, ...

Exceptions (delivered through command reply futures)::

    ActorsError
    ├── InvalidCommand            bad input; .field names it (empty text, oversize, bad id)
    ├── NotFound
    │   ├── UnknownSession
    │   ├── UnknownRun
    │   └── UnknownApproval
    ├── Conflict
    │   ├── SessionKeyTaken
    │   ├── ApprovalAlreadyResolved
    │   ├── RunNotActive
    │   └── GrantNotActive        no ``always`` grant of that tool to that principal
    ├── NodeDraining              the node is shutting down
    ├── BudgetExceeded            a hard usage budget refuses the run; .budget names it
    └── IllegalTransition         a forbidden run state change (a bug)

Tasks and learning add their own leaves: ``UnknownTask`` and ``UnknownCandidate`` (NotFound),
``TaskNotActive`` and ``CandidateConflict`` (Conflict); workspace checkpoints
(``actors.checkpoints``) ``UnknownCheckpoint`` (NotFound) and ``CheckpointUnrestorable``
(Conflict). The provider seam (``actors.provider``)
has its own: ProviderError → ProviderTimeout, ProviderUnavailable (no endpoint could answer).
Inside a task, a handler raises
``PermanentFailure`` (fail now, no retry), is stopped by ``TaskInterrupted``, and reflection
refuses a model's answer with ``InvalidReflection`` and a run the journal lacks with
``UnknownRunToReflect`` (a ``LookupError``); none leaves the task. A chat message no router
decision should see is ``InvalidMessage`` (``actors.channels.message``, a ``ValueError`` naming
the field); a memory item's writer (``actors.memory.items``) refuses input with
``MemoryInputError`` (a ``ValueError`` naming the field), an unknown id with
``UnknownMemoryItem`` (a ``LookupError``) and a second delete with
``MemoryItemAlreadyDeleted``. Every class's failure kind is in :mod:`transports.failures`.
"""

from typing import TYPE_CHECKING

from events.lazy import exports

if TYPE_CHECKING:
    from actors.approvals.gate import GateDecision, ToolGate
    from actors.config import ActorsConfig, RunBudgets
    from actors.errors import (
        ActorsError,
        ApprovalAlreadyResolved,
        Conflict,
        GrantNotActive,
        IllegalTransition,
        InvalidCommand,
        NodeDraining,
        NotFound,
        RunNotActive,
        SessionKeyTaken,
        UnknownApproval,
        UnknownRun,
        UnknownSession,
    )
    from actors.runs.status import RunStatus
    from actors.system.node import Node

__all__ = [
    "ActorsConfig",
    "ActorsError",
    "ApprovalAlreadyResolved",
    "Conflict",
    "GateDecision",
    "GrantNotActive",
    "IllegalTransition",
    "InvalidCommand",
    "Node",
    "NodeDraining",
    "NotFound",
    "RunBudgets",
    "RunNotActive",
    "RunStatus",
    "SessionKeyTaken",
    "ToolGate",
    "UnknownApproval",
    "UnknownRun",
    "UnknownSession",
]

__getattr__ = exports(
    __name__,
    {
        "actors.config": ("ActorsConfig", "RunBudgets"),
        "actors.errors": (
            "ActorsError",
            "ApprovalAlreadyResolved",
            "Conflict",
            "GrantNotActive",
            "IllegalTransition",
            "InvalidCommand",
            "NodeDraining",
            "NotFound",
            "RunNotActive",
            "SessionKeyTaken",
            "UnknownApproval",
            "UnknownRun",
            "UnknownSession",
        ),
        "actors.approvals.gate": ("GateDecision", "ToolGate"),
        "actors.system.node": ("Node",),
        "actors.runs.status": ("RunStatus",),
    },
)
"""Each name is imported from its module when first used (:mod:`events.lazy`): a CLI command
that needs one module of the package (``actors.approvals.grants``) never loads the node."""
