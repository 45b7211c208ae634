"""The policy engine: parse once at start, then answer many questions fast.

``decide`` turns one proposed tool call into allow / deny / approval_required:

1. ask Cedar ``tool.execute`` with the call as it is (``approved`` as given);
2. permitted -> **allow**, naming the permits;
3. not permitted and the call was already approved -> **deny**;
4. otherwise ask again as if a human had approved it: permitted -> **approval_required**
   (naming the permits that would allow it), still not permitted -> **deny** (naming the
   forbids that hold even with approval, or none: deny by default).

A forbid that only holds while the call is unapproved (``baseline.posture_ask_each_time``)
is therefore an approval gate, and any other forbid is a plain deny. When the tool's
declaration makes a refusal likely (sensitive, or not ``always_allow``), both questions
go to Cedar in one batch; that is only a speed-up, the answer is the same.

Everything Cedar needs that does not change per call is built once: the schema, the
policy set, the entity set (actions plus one Tool entity per tool declaration, cached),
and the fixed part of each tool's context.

A decision is remembered by everything it can depend on (``PolicyEngine._memo_key``): the
tool's declaration, the principal, its roles, ``approved``, and those per-call context fields
(``session_id``, ``run_id``, ``usage_today``, ``channel``) that a loaded policy reads
(:mod:`policies.context_reads`). With the baseline policies, which read none of them, a
session's repeated calls of a tool are decided by Cedar once; an operator policy that reads
``context.usage_today`` puts it in the key, and one that reads the context whole turns the
memo off. Cedar evaluation is a pure function of the policy set, the entities and the
request, so a remembered decision is the one Cedar would give again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import cedarpy
import msgspec

from policies.access import ROLES, AccessControl, AccessRequest
from policies.decision import Decision, allow_or_deny, allowed, denied, errors_of, ids_of
from policies.errors import PolicyRequestError
from policies.loader import LoadedPolicies, PolicySource, load_policies
from policies.request import (
    CAPABILITIES,
    POSTURES,
    RISKS,
    SENSITIVE_CAPABILITIES,
    SENSITIVE_RISKS,
    SecretRequest,
    ToolRequest,
    UsageToday,
)

TOOL_EXECUTE: Final = "tool.execute"
VAULT_USE: Final = "vault.use"
_ACTION_TOOL_EXECUTE: Final = {"type": "Action", "id": TOOL_EXECUTE}
_TOOL_CACHE_LIMIT: Final = 4096
"""Tool declarations are few; the bound only stops a caller that invents them."""


class _EntityRef(msgspec.Struct, frozen=True):
    type: str
    id: str


class _EntityValue(msgspec.Struct, frozen=True):
    entity: _EntityRef = msgspec.field(name="__entity")


class _CallFields(msgspec.Struct, frozen=True, omit_defaults=True):
    """The per-call part of the ``tool.execute`` context."""

    session_id: str
    run_id: str
    stranger: bool
    usage_today: UsageToday
    channel: _EntityValue | None = None
    mcp_server: str | None = None
    """For an MCP tool (``mcp.SERVER.TOOL``): the server's configured name."""
    mcp_tool: str | None = None
    """For an MCP tool: the tool's name as the server announces it."""


class _ToolEntity(msgspec.Struct, frozen=True):
    uid: _EntityRef
    attrs: dict[str, Any]
    parents: tuple[()] = ()


class _ToolFacts(msgspec.Struct, frozen=True):
    """Everything derived from one tool declaration, built on first use and cached."""

    entities: cedarpy.Entities
    """The action entities plus this tool's entity."""
    resource: dict[str, str]
    context_unapproved: str
    """Context JSON up to and including the comma before the per-call fields."""
    context_approved: str
    likely_refused: bool
    """True when an unapproved call will probably not be permitted outright."""
    approval_why: tuple[str, ...]
    """Why this tool needs approval under the baseline, in words."""


_encode = msgspec.json.Encoder().encode

_PER_CALL_FIELDS: Final = ("session_id", "run_id", "usage_today", "channel")
"""The ``tool.execute`` context's fields that are not derived from the tool's declaration,
the principal, its roles or ``approved`` (``stranger`` and the MCP server and tool are): by
the same names in :class:`ToolRequest` and in the context (:class:`_CallFields`)."""
_DECISION_MEMO_LIMIT: Final = 8192
"""Decisions kept at most: a key per (tool, principal, roles, approved) when the policies
read no per-call field; cleared when full."""


class PolicyEngine:
    """Answers policy questions from a policy set parsed once at start.

    Build it with :meth:`load`. It is immutable apart from internal caches (tool
    declarations, decisions) and is safe to share between threads.
    """

    def __init__(self, loaded: LoadedPolicies) -> None:
        self._schema = loaded.schema
        self._policy_set = loaded.policy_set
        self._sources = loaded.sources
        self._digest = loaded.digest
        self._by_id = {source.policy_id: source for source in loaded.sources}
        self._base_entities = cedarpy.Entities.from_json_str("[]", loaded.schema)
        self._tools: dict[tuple[str, tuple[str, ...], str, str], _ToolFacts] = {}
        self._with_roles: dict[tuple[Any, ...], cedarpy.Entities] = {}
        """A tool's entities plus a principal with its roles as parents, by (the tool's
        declaration, principal, roles)."""
        self._access = AccessControl(loaded.policy_set, loaded.schema)
        reads = loaded.context_reads
        self._per_call: tuple[str, ...] | None = (
            None if reads is None else tuple(f for f in _PER_CALL_FIELDS if f in reads)
        )
        """The per-call request fields a policy reads (None: a policy reads the context whole,
        and no decision is memoized)."""
        self._decisions: dict[tuple[Any, ...], Decision] = {}
        """``tool.execute`` decisions by everything they can depend on (:meth:`_memo_key`)."""

    @classmethod
    def load(cls, operator_dir: Path | None = None) -> PolicyEngine:
        """Parse and validate the packaged baseline plus ``operator_dir/*.cedar``.

        Raises :class:`~policies.errors.PolicyParseError` or
        :class:`~policies.errors.PolicyValidationError` naming the file and carrying
        cedarpy's message; the node must not start when it does.
        """
        return cls(load_policies(operator_dir))

    @property
    def digest(self) -> str:
        """The loaded schema's and policies' digest (:attr:`LoadedPolicies.digest`)."""
        return self._digest

    @property
    def policy_ids(self) -> tuple[str, ...]:
        """Every loaded policy's stable id, in load order."""
        return tuple(source.policy_id for source in self._sources)

    @property
    def sources(self) -> tuple[PolicySource, ...]:
        """Where each loaded policy came from, in load order."""
        return self._sources

    def source_of(self, policy_id: str) -> PolicySource:
        """Where the policy ``policy_id`` came from; ``KeyError`` if it is not loaded."""
        return self._by_id[policy_id]

    def decide(self, request: ToolRequest) -> Decision:
        """Decide one proposed tool call (see the module docstring for the steps).

        Raises :class:`~policies.errors.PolicyRequestError` naming the field when the
        request is malformed (empty principal, unknown risk, posture or capability).
        """
        facts = self._facts(request)
        entities = self._entities_for(facts, request)
        key = self._memo_key(request)
        try:
            known = None if key is None else self._decisions.get(key)
        except TypeError:  # unhashable: ``roles=[]``, which the full path takes as no roles
            key = known = None
        if known is not None:
            return known
        decision = self._decide(facts, entities, request)
        if key is not None:
            if len(self._decisions) >= _DECISION_MEMO_LIMIT:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def _memo_key(self, request: ToolRequest) -> tuple[Any, ...] | None:
        """What a ``tool.execute`` decision can depend on: the policies are fixed, the entities
        follow from the tool's declaration, the principal and its roles, and the context from
        those, ``approved`` and the per-call fields; of these last, only the ones a policy reads
        (``session_id``, ``run_id``, ``usage_today``, ``channel``) are in the key. None: not
        memoized (a policy reads the context whole)."""
        per_call = self._per_call
        if per_call is None:
            return None
        return (
            request.tool,
            request.capabilities,
            request.risk,
            request.posture,
            request.principal,
            request.roles,
            request.approved,
            *(getattr(request, field) for field in per_call),
        )

    def _decide(
        self, facts: _ToolFacts, entities: cedarpy.Entities, request: ToolRequest
    ) -> Decision:
        fields = _encode(_call_fields(request)).decode()
        principal = {"type": "Principal", "id": request.principal}
        context = facts.context_approved if request.approved else facts.context_unapproved
        first = {
            "principal": principal,
            "action": _ACTION_TOOL_EXECUTE,
            "resource": facts.resource,
            "context": context + fields[1:],
        }
        if request.approved:
            return allow_or_deny(
                cedarpy.is_authorized(first, self._policy_set, entities, self._schema),
                TOOL_EXECUTE,
            )
        if not (facts.likely_refused or request.stranger):
            unapproved_result = cedarpy.is_authorized(
                first, self._policy_set, entities, self._schema
            )
            if unapproved_result.allowed:
                return allowed(unapproved_result)
        approved = {
            "principal": principal,
            "action": _ACTION_TOOL_EXECUTE,
            "resource": facts.resource,
            "context": facts.context_approved + fields[1:],
        }
        if facts.likely_refused or request.stranger:
            unapproved_result, approved_result = cedarpy.is_authorized_batch(
                [first, approved], self._policy_set, entities, self._schema
            )
        else:
            approved_result = cedarpy.is_authorized(
                approved, self._policy_set, entities, self._schema
            )
        if unapproved_result.allowed:
            return allowed(unapproved_result)
        if not approved_result.allowed:
            return denied(approved_result, TOOL_EXECUTE)
        why = facts.approval_why
        if request.stranger:
            why = ("the principal is a chat sender with no role", *why)
        return _approval_required(unapproved_result, approved_result, why)

    def decide_secret(self, request: SecretRequest) -> Decision:
        """Whether the call of ``request.tool`` may have ``request.secret`` resolved into it
        (``vault.use``, policies/vault.cedar): ``allow`` or ``deny``, naming the policies.

        Raises :class:`~policies.errors.PolicyRequestError` naming the field when the request
        is malformed (an empty principal, tool or secret, an unknown role)."""
        for field in ("principal", "tool", "secret"):
            _require_text(field, getattr(request, field))
        roles = request.roles
        if type(roles) is not tuple or any(type(r) is not str or r not in ROLES for r in roles):
            raise PolicyRequestError("roles", f"must be a tuple of roles: {list(ROLES)}")
        refs = [{"type": "Role", "id": r} for r in roles]
        doc = [
            {"uid": {"type": "Principal", "id": request.principal}, "attrs": {}, "parents": refs}
        ]
        doc += [{"uid": r, "attrs": {}, "parents": []} for r in refs]
        query = {
            "principal": {"type": "Principal", "id": request.principal},
            "action": {"type": "Action", "id": VAULT_USE},
            "resource": {"type": "Secret", "id": request.secret},
            "context": {
                "tool": request.tool,
                "session_id": request.session_id,
                "run_id": request.run_id,
            },
        }
        result = cedarpy.is_authorized(query, self._policy_set, _encode(doc).decode(), self._schema)
        return allow_or_deny(result, VAULT_USE)

    def authorize(self, request: AccessRequest) -> Decision:
        """Decide one API request (see :mod:`policies.access`): ``allow`` or ``deny``.

        Raises :class:`~policies.errors.PolicyRequestError` naming the field when the
        request is malformed (unknown action or role, a wrong context)."""
        return self._access.authorize(request)

    def _facts(self, request: ToolRequest) -> _ToolFacts:
        _require_text("principal", request.principal)
        if type(request.approved) is not bool:
            raise PolicyRequestError("approved", "must be a bool")
        if request.channel is not None:
            _require_text("channel", request.channel)
        if type(request.session_id) is not str:
            raise PolicyRequestError("session_id", "must be a string")
        if type(request.run_id) is not str:
            raise PolicyRequestError("run_id", "must be a string")
        if type(request.capabilities) is not tuple:
            raise PolicyRequestError("capabilities", "must be a tuple of strings")
        if type(request.usage_today) is not UsageToday:
            raise PolicyRequestError("usage_today", "must be a UsageToday")
        key = (request.tool, request.capabilities, request.risk, request.posture)
        try:
            facts = self._tools.get(key)
        except TypeError:  # an unhashable field: let _build_facts name it
            facts = None
        if facts is None:
            facts = self._build_facts(request)
            if len(self._tools) >= _TOOL_CACHE_LIMIT:
                self._tools.clear()
            self._tools[key] = facts
        return facts

    def _entities_for(self, facts: _ToolFacts, request: ToolRequest) -> cedarpy.Entities:
        """The tool's entities, with the principal and its roles when it has any."""
        roles = request.roles
        if not roles:
            return facts.entities
        if type(roles) is not tuple or any(type(r) is not str or r not in ROLES for r in roles):
            raise PolicyRequestError("roles", f"must be a tuple of roles: {list(ROLES)}")
        key: tuple[Any, ...] = (request.tool, request.capabilities, request.risk)
        key += (request.posture, request.principal, roles)
        entities = self._with_roles.get(key)
        if entities is None:
            refs = [{"type": "Role", "id": r} for r in roles]
            doc = [
                {
                    "uid": {"type": "Principal", "id": request.principal},
                    "attrs": {},
                    "parents": refs,
                }
            ]
            doc += [{"uid": r, "attrs": {}, "parents": []} for r in refs]
            entities = facts.entities.with_added_json_str(_encode(doc).decode(), self._schema)
            if len(self._with_roles) >= _TOOL_CACHE_LIMIT:
                self._with_roles.clear()
            self._with_roles[key] = entities
        return entities

    def _build_facts(self, request: ToolRequest) -> _ToolFacts:
        _require_text("tool", request.tool)
        unknown = [c for c in request.capabilities if type(c) is not str or c not in CAPABILITIES]
        if unknown:
            raise PolicyRequestError(
                "capabilities",
                f"unknown capability {unknown[0]!r}; expected some of {sorted(CAPABILITIES)}",
            )
        if request.risk not in RISKS:
            raise PolicyRequestError("risk", f"{request.risk!r} is not one of {list(RISKS)}")
        if request.posture not in POSTURES:
            raise PolicyRequestError(
                "posture", f"{request.posture!r} is not one of {list(POSTURES)}"
            )
        attrs: dict[str, Any] = {
            "capabilities": sorted(set(request.capabilities)),
            "risk": request.risk,
            "posture": request.posture,
        }
        uid = _EntityRef("Tool", request.tool)
        entities = self._base_entities.with_added_json_str(
            _encode([_ToolEntity(uid=uid, attrs=attrs)]).decode(), self._schema
        )
        # '{"capabilities":[..],"posture":"..","risk":".."}' -> the same without its "}"
        static = _encode(attrs).decode()[:-1]
        why = _approval_why(request)
        return _ToolFacts(
            entities=entities,
            resource={"type": "Tool", "id": request.tool},
            context_unapproved=static + ',"approved":false,',
            context_approved=static + ',"approved":true,',
            likely_refused=request.posture != "always_allow" or bool(why),
            approval_why=why,
        )


def _call_fields(request: ToolRequest) -> _CallFields:
    channel = request.channel
    entity = None if channel is None else _EntityValue(_EntityRef("Channel", channel))
    server = tool = None
    if request.tool.startswith("mcp."):
        server, _, tool = request.tool.removeprefix("mcp.").partition(".")
    return _CallFields(
        request.session_id,
        request.run_id,
        request.stranger,
        request.usage_today,
        entity,
        server,
        tool,
    )


def _require_text(field: str, value: object) -> None:
    if type(value) is not str:
        raise PolicyRequestError(field, "must be a string")
    if not value:
        raise PolicyRequestError(field, "must not be empty")


def _approval_why(request: ToolRequest) -> tuple[str, ...]:
    why: list[str] = []
    if request.posture == "ask_each_time":
        why.append("tool posture is ask_each_time")
    why.extend(
        f"tool has capability {capability}"
        for capability in SENSITIVE_CAPABILITIES
        if capability in request.capabilities
    )
    if request.risk in SENSITIVE_RISKS:
        why.append(f"tool risk is {request.risk}")
    return tuple(why)


def _approval_required(
    unapproved: cedarpy.AuthzResult, approved: cedarpy.AuthzResult, reasons: tuple[str, ...]
) -> Decision:
    gates = ", ".join(ids_of(unapproved))
    why = ", ".join(reasons)
    if why and gates:
        why += f" (held back by {gates})"
    elif gates:
        why = f"held back by {gates}"
    elif not why:
        why = "no policy permits this call without approval"
    return Decision(
        outcome="approval_required",
        policy_ids=ids_of(approved),
        reason=f"approval required: {why}",
        errors=errors_of(unapproved) + errors_of(approved),
    )
