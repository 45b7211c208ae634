"""``GET /v1/whoami``: who the bearer token speaks for, and what that principal may do.

The console calls it to log in (any valid token, not only ``admin.token``) and to decide which
controls to show: a viewer sees no approve, deny, cancel, new-session or posture controls.

Any authenticated principal may call it (the guard has already refused a bad token with a
401); it is not a Cedar action of its own, because it reveals only what the caller could learn
by trying. Each answer in ``may`` / ``may_own`` is a probe through
:meth:`~transports.access.authority.Authority.may`, the path every route's decision takes, on a
placeholder resource: nothing changes, so nothing is journaled.

- ``may[action]``: whether the principal may do ``action`` on a resource someone else owns
  (a session another principal created, a run another principal started): what its roles
  grant node-wide.
- ``may_own[action]``: the same on a resource the principal owns itself (an ``agent`` starts
  runs only in its own sessions).

Both are hints for showing controls, not promises: a policy that looks at the resource itself
(a ``forbid`` on critical tools, on self-approval) still refuses one item with a 403, which
the console reports. The server decides every request again.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from policies import ACTIONS, SCOPES
from transports.access.authority import Authority, Scope
from transports.access.tokens import Credentials
from transports.http.context import CONTEXT, caller
from transports.http.replies import json_reply

PROBE_RESOURCE = "whoami-probe"
"""The id of the resource a probe asks about: no real session, run or approval has it."""

SOMEONE_ELSE = "probe:someone-else"
"""The owner of the probed resource in ``may``: never a real principal (a token's principal
is ``user:``, ``service:`` or ``agent:``; the admin is ``admin``)."""

routes = web.RouteTableDef()


class Whoami(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/whoami``: the caller and, per API action, whether it may do it."""

    principal: str
    """Who the token speaks for (``admin`` for the data dir's ``admin.token``)."""
    roles: tuple[str, ...]
    token_id: str | None
    """The token's id (as ``reel tokens list`` shows it); null for ``admin.token``, which is
    not a record of the token book."""
    may: dict[str, bool]
    """Every API action -> whether the principal may do it on what others own."""
    may_own: dict[str, bool]
    """Every API action -> whether it may do it on what it owns itself (its sessions, runs)."""


def probe_scope(action: str, owner: str) -> Scope | None:
    """The scope a probe of ``action`` asks about: a placeholder resource owned (and, for runs
    and approvals, started) by ``owner``, with every other context field empty. None for
    actions on the node itself (they have no context)."""
    shape = SCOPES[ACTIONS[action].scope]
    if not shape:
        return None
    context = {key: owner if kind == "principal" else "" for key, kind in shape.items()}
    return PROBE_RESOURCE, context


def whoami(authority: Authority, who: Credentials) -> Whoami:
    """What ``who`` may do, action by action (pure decisions: nothing is journaled)."""

    def probe(owner: str) -> dict[str, bool]:
        return {a: authority.may(who, a, probe_scope(a, owner)) for a in ACTIONS}

    known = authority.tokens.get(who.token_id) is not None
    return Whoami(
        principal=who.principal,
        roles=who.roles,
        token_id=who.token_id if known else None,
        may=probe(SOMEONE_ELSE),
        may_own=probe(who.principal),
    )


@routes.get("/v1/whoami")
async def get_whoami(request: web.Request) -> web.Response:
    return json_reply(whoami(request.app[CONTEXT].authority, caller(request)))
