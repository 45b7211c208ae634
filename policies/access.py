"""API actions: who may do what through HTTP, gRPC and the CLI, decided by Cedar.

Every route and method maps to one :data:`ACTIONS` entry. A request names the principal, its
roles (Cedar entity parents: ``Principal::"user:alice"`` in ``Role::"approver"``), the action,
the resource id and the action's context (its keys are fixed per action by the schema's
context types; ``docs/policy.md`` documents them). The answer is a plain :class:`Decision`
naming the deciding policies, like a tool decision.

Decisions are pure functions of (principal, roles, action, resource, context, policy set), so
they are cached per engine (the policy set is fixed for the engine's life): a reader polling
the same run costs one dictionary lookup after the first request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Final

import cedarpy
import msgspec

from policies.decision import Decision, allow_or_deny
from policies.errors import PolicyRequestError

ROLES: Final[dict[str, str]] = {
    "admin": "everything: every API action, tokens, postures and the vault included; its "
    "runs' tool calls may use vault secrets",
    "operator": "start and cancel runs in any session, read everything, decide approvals, "
    "revoke always grants, review learning candidates, "
    "write and delete memory, cancel background tasks, schedule runs as itself; its runs' tool "
    "calls may use vault secrets",
    "approver": "read everything, decide approvals, revoke always grants, review learning "
    "candidates",
    "viewer": "read everything",
    "agent": "create sessions; start, cancel and read runs only in the sessions it owns; read "
    "global memory and its own, write and delete only its own; schedule runs as itself",
}
"""The built-in roles and, in words, what ``policies/*.cedar`` lets each do."""

_PRINCIPAL: Final = "principal"
_TEXT: Final = "text"

SCOPES: Final[dict[str, dict[str, str]]] = {
    "none": {},
    "session": {"session_id": _TEXT, "owner": _PRINCIPAL},
    "run": {"run_id": _TEXT, "session_id": _TEXT, "owner": _PRINCIPAL, "run_principal": _PRINCIPAL},
    "approval": {
        "approval_id": _TEXT,
        "tool": _TEXT,
        "risk": _TEXT,
        "run_id": _TEXT,
        "session_id": _TEXT,
        "owner": _PRINCIPAL,
        "run_principal": _PRINCIPAL,
        "decision": _TEXT,
        "scope": _TEXT,
        "match": _TEXT,
    },
    "posture": {"session_id": _TEXT, "owner": _PRINCIPAL, "tool": _TEXT, "posture": _TEXT},
    "grant": {"grant_principal": _PRINCIPAL, "tool": _TEXT},
    "channel_command": {
        "command": _TEXT,
        "conversation": _TEXT,
        "session_id": _TEXT,
        "owner": _PRINCIPAL,
        "run_id": _TEXT,
        "run_principal": _PRINCIPAL,
    },
    "memory": {"item_id": _TEXT, "scope": _TEXT, "owner": _PRINCIPAL, "session_id": _TEXT},
    "task": {"task_id": _TEXT, "kind": _TEXT},
    "learning": {
        "candidate_id": _TEXT,
        "kind": _TEXT,
        "concerns": _PRINCIPAL,
        "status": _TEXT,
        "decision": _TEXT,
    },
    "vault": {"name": _TEXT, "operation": _TEXT},
    "schedule": {"name": _TEXT, "runs_as": _PRINCIPAL, "operation": _TEXT},
    "usage": {"of": _PRINCIPAL},
}
"""Each context type of the schema: key -> ``text`` or ``principal`` (an entity reference)."""


class ActionSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One API action as the schema declares it."""

    resource_type: str
    scope: str
    """The key of its context type in :data:`SCOPES`."""
    changes_state: bool
    """Whether a permitted request changes state (its decision is recorded on the journal)."""


ACTIONS: Final[dict[str, ActionSpec]] = {
    "session.list": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "run.list": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "approval.list": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "node.read": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "tool.list": ActionSpec(resource_type="Tool", scope="none", changes_state=False),
    "tool.read": ActionSpec(resource_type="Tool", scope="none", changes_state=False),
    "journal.read": ActionSpec(resource_type="Journal", scope="none", changes_state=False),
    "incident.read": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "session.read": ActionSpec(resource_type="Session", scope="session", changes_state=False),
    "run.read": ActionSpec(resource_type="Run", scope="run", changes_state=False),
    "approval.read": ActionSpec(resource_type="Approval", scope="approval", changes_state=False),
    "session.create": ActionSpec(resource_type="Node", scope="none", changes_state=True),
    "session.reset": ActionSpec(resource_type="Session", scope="session", changes_state=True),
    "session.compact": ActionSpec(resource_type="Session", scope="session", changes_state=True),
    "session.restore": ActionSpec(resource_type="Session", scope="session", changes_state=True),
    "run.start": ActionSpec(resource_type="Session", scope="session", changes_state=True),
    "run.cancel": ActionSpec(resource_type="Run", scope="run", changes_state=True),
    "approval.resolve": ActionSpec(resource_type="Approval", scope="approval", changes_state=True),
    "posture.set": ActionSpec(resource_type="Session", scope="posture", changes_state=True),
    "grant.revoke": ActionSpec(resource_type="Tool", scope="grant", changes_state=True),
    "token.manage": ActionSpec(resource_type="Token", scope="none", changes_state=True),
    "memory.list": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "memory.read": ActionSpec(resource_type="Memory", scope="memory", changes_state=False),
    "memory.write": ActionSpec(resource_type="Memory", scope="memory", changes_state=True),
    "memory.delete": ActionSpec(resource_type="Memory", scope="memory", changes_state=True),
    "task.list": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "task.read": ActionSpec(resource_type="Task", scope="task", changes_state=False),
    "task.cancel": ActionSpec(resource_type="Task", scope="task", changes_state=True),
    "learning.list": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "learning.read": ActionSpec(resource_type="Learning", scope="learning", changes_state=False),
    "learning.review": ActionSpec(resource_type="Learning", scope="learning", changes_state=True),
    "workspace.read": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "workspace.restore": ActionSpec(resource_type="Node", scope="none", changes_state=True),
    "channel.list": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "channel.route": ActionSpec(resource_type="Channel", scope="none", changes_state=True),
    "channel.pair": ActionSpec(resource_type="Channel", scope="none", changes_state=True),
    "channel.command": ActionSpec(
        resource_type="Channel", scope="channel_command", changes_state=True
    ),
    "mcp.test": ActionSpec(resource_type="Node", scope="none", changes_state=True),
    "provider.test": ActionSpec(resource_type="Node", scope="none", changes_state=True),
    "vault.list": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "vault.manage": ActionSpec(resource_type="Secret", scope="vault", changes_state=True),
    "schedule.list": ActionSpec(resource_type="Node", scope="none", changes_state=False),
    "schedule.create": ActionSpec(resource_type="Schedule", scope="schedule", changes_state=True),
    "schedule.manage": ActionSpec(resource_type="Schedule", scope="schedule", changes_state=True),
    "usage.read": ActionSpec(resource_type="Node", scope="usage", changes_state=False),
}
"""Every API action (``tool.execute`` is decided by :meth:`PolicyEngine.decide`, ``vault.use``
by :meth:`PolicyEngine.decide_secret`)."""

NODE: Final = "local"
"""The id of the one ``Node`` resource (lists, session creation, node status)."""

_CACHE_LIMIT: Final = 16_384


class AccessRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One API request as Cedar sees it."""

    principal: str
    roles: tuple[str, ...]
    action: str
    resource_id: str = NODE
    context: Mapping[str, str] = msgspec.field(default_factory=dict)
    """The action's context: exactly the keys of its scope, all strings (principal keys name
    a principal by its id)."""

    def key(self) -> tuple[object, ...]:
        return (
            self.principal,
            self.roles,
            self.action,
            self.resource_id,
            tuple(sorted(self.context.items())),
        )


class _Ref(msgspec.Struct, frozen=True):
    type: str
    id: str


class _Entity(msgspec.Struct, frozen=True):
    uid: _Ref
    attrs: dict[str, str]
    parents: tuple[_Ref, ...]


_encode = msgspec.json.Encoder().encode


class AccessControl:
    """Decides API requests against one loaded policy set; safe to share between threads."""

    def __init__(self, policy_set: cedarpy.PolicySet, schema: cedarpy.Schema) -> None:
        self._policy_set = policy_set
        self._schema = schema
        self._decisions: OrderedDict[tuple[object, ...], Decision] = OrderedDict()
        self._entities: dict[tuple[str, tuple[str, ...]], str] = {}
        self._lock = threading.Lock()

    def authorize(self, request: AccessRequest) -> Decision:
        """Allow or deny ``request``, naming the deciding policies.

        Raises :class:`PolicyRequestError` naming the field when the request is malformed
        (unknown action or role, a context key missing, extra or not a string)."""
        key = request.key()
        with self._lock:
            cached = self._decisions.get(key)
            if cached is not None:
                self._decisions.move_to_end(key)
                return cached
        decision = self._decide(request)
        with self._lock:
            self._decisions[key] = decision
            if len(self._decisions) > _CACHE_LIMIT:
                self._decisions.popitem(last=False)
        return decision

    def _decide(self, request: AccessRequest) -> Decision:
        spec = ACTIONS.get(request.action)
        if spec is None:
            raise PolicyRequestError("action", f"unknown API action {request.action!r}")
        _require_text("principal", request.principal)
        _require_text("resource_id", request.resource_id)
        for role in request.roles:
            if role not in ROLES:
                raise PolicyRequestError("roles", f"unknown role {role!r}; roles: {list(ROLES)}")
        query = {
            "principal": {"type": "Principal", "id": request.principal},
            "action": {"type": "Action", "id": request.action},
            "resource": {"type": spec.resource_type, "id": request.resource_id},
            "context": _context(spec, request.context),
        }
        result = cedarpy.is_authorized(
            query, self._policy_set, self._principal_entities(request), self._schema
        )
        return allow_or_deny(result, request.action)

    def _principal_entities(self, request: AccessRequest) -> str:
        """The entity store: the principal with its roles as parents, and the roles."""
        key = (request.principal, request.roles)
        entities = self._entities.get(key)
        if entities is None:
            roles = tuple(_Ref("Role", r) for r in request.roles)
            doc = [_Entity(uid=_Ref("Principal", request.principal), attrs={}, parents=roles)]
            doc.extend(_Entity(uid=r, attrs={}, parents=()) for r in roles)
            entities = _encode(doc).decode()
            if len(self._entities) >= _CACHE_LIMIT:
                self._entities.clear()
            self._entities[key] = entities
        return entities


def _context(spec: ActionSpec, context: Mapping[str, str]) -> dict[str, object]:
    shape = SCOPES[spec.scope]
    extra = sorted(set(context) - set(shape))
    if extra:
        raise PolicyRequestError(f"context.{extra[0]}", "is not part of this action's context")
    out: dict[str, object] = {}
    for name, kind in shape.items():
        if name not in context:
            raise PolicyRequestError(f"context.{name}", "is required by this action's context")
        value = context[name]
        if type(value) is not str:
            raise PolicyRequestError(f"context.{name}", "must be a string")
        if kind == _PRINCIPAL:
            out[name] = {"__entity": {"type": "Principal", "id": value}}
        else:
            out[name] = value
    return out


def _require_text(field: str, value: object) -> None:
    if type(value) is not str or not value:
        raise PolicyRequestError(field, "must be a non-empty string")
