"""Cedar policy for reel: the baseline policy files, the schema, and the engine.

The package imports nothing of reel's: the node describes a tool call (:class:`ToolRequest`)
or an API request (:class:`AccessRequest`: principal, roles, action, resource, context) with
plain values and gets a plain :class:`Decision` back, naming the policies that decided. Files:
``schema.cedarschema`` (the vocabulary), ``read_only.cedar``, ``approvals.cedar``,
``roles.cedar`` (who may do what through the API), ``tool_execute.cedar`` (the baseline,
deny by default), ``vault.cedar`` (which runs' tool calls may use a vault secret) and
``schedules.cedar`` (who may schedule runs as whom), plus the operator's ``*.cedar`` files
from the data dir's ``policies/``.
Everything is parsed and validated once, in :meth:`PolicyEngine.load`.

Exceptions::

    PolicyError                     anything this package raises
    ├── PolicyLoadError             the policy set cannot be built (unreadable file or
    │   │                           directory, broken schema); has .path and .detail
    │   ├── PolicyParseError        a policy file is not valid Cedar syntax
    │   └── PolicyValidationError   a policy file does not validate against the schema,
    │                               reuses a policy id, or holds a template
    └── PolicyRequestError          a request is malformed (also a ValueError); has .field
"""

from policies.access import ACTIONS, ROLES, SCOPES, AccessRequest, ActionSpec
from policies.decision import Decision, Outcome
from policies.engine import TOOL_EXECUTE, VAULT_USE, PolicyEngine
from policies.errors import (
    PolicyError,
    PolicyLoadError,
    PolicyParseError,
    PolicyRequestError,
    PolicyValidationError,
)
from policies.loader import BASELINE_DIR, SCHEMA_PATH, PolicySource
from policies.request import (
    CAPABILITIES,
    CHANNEL_PRINCIPAL_PREFIX,
    POSTURES,
    RISKS,
    SENSITIVE_CAPABILITIES,
    SENSITIVE_RISKS,
    SecretRequest,
    ToolRequest,
    UsageToday,
)

__all__ = [
    "ACTIONS",
    "BASELINE_DIR",
    "CAPABILITIES",
    "CHANNEL_PRINCIPAL_PREFIX",
    "POSTURES",
    "RISKS",
    "ROLES",
    "SCHEMA_PATH",
    "SCOPES",
    "SENSITIVE_CAPABILITIES",
    "SENSITIVE_RISKS",
    "TOOL_EXECUTE",
    "VAULT_USE",
    "AccessRequest",
    "ActionSpec",
    "Decision",
    "Outcome",
    "PolicyEngine",
    "PolicyError",
    "PolicyLoadError",
    "PolicyParseError",
    "PolicyRequestError",
    "PolicySource",
    "PolicyValidationError",
    "SecretRequest",
    "ToolRequest",
    "UsageToday",
]
