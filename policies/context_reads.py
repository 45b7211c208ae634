"""What the loaded policies read of a request's context: the condition a decision's memo
(:class:`policies.engine.PolicyEngine`) rests on.

A Cedar decision is a pure function of the policy set, the entities and the request. The
tool request's context carries fields that change with every call (``session_id``,
``run_id``, ``usage_today``) beside the tool's declaration and the principal; when no policy
reads a field, two requests that differ only in it get the same decision, errors and
reasons included. This module finds the fields read, from the policies' JSON form (the EST
:func:`cedarpy.policies_to_json_str` gives and :mod:`policies.loader` keeps): every
``context.X``, ``context["X"]`` and ``context has X``. A policy that uses ``context`` in any
other way (compares it whole, passes it to a function...) could depend on every field, and
then nothing is memoized: the answer is None.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_CONTEXT: dict[str, str] = {"Var": "context"}


def context_reads(policies: Iterable[dict[str, Any]]) -> frozenset[str] | None:
    """The context attributes ``policies`` (Cedar JSON policies) read, or None when one of
    them uses the context other than by reading a named attribute."""
    reads: set[str] = set()
    for policy in policies:
        if not _walk(policy, reads):
            return None
    return frozenset(reads)


def _walk(node: object, reads: set[str]) -> bool:
    """Collect what ``node`` reads of the context into ``reads``; False when it uses the
    context whole."""
    if isinstance(node, list):
        return all(_walk(item, reads) for item in node)
    if not isinstance(node, dict):
        return True
    if node == _CONTEXT:
        return False  # reached only where it is not the left side of an attribute read
    if len(node) == 1:
        ((op, inner),) = node.items()
        if op in (".", "has") and isinstance(inner, dict) and inner.get("left") == _CONTEXT:
            attr = inner.get("attr")
            if not isinstance(attr, str):
                return False
            reads.add(attr)
            return True
    return all(_walk(value, reads) for value in node.values())
