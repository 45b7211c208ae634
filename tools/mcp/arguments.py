"""An MCP tool's arguments: a msgspec Struct for the catalog, checked against the server's schema.

The catalog decodes every call's arguments into the tool's ``args_type`` (grants, the tape
and approvals digest that value), so each property of the server's ``inputSchema`` becomes a
field of any JSON type, absent unless given; properties the schema does not declare are refused
(stricter than JSON Schema's default, so a model cannot smuggle a field the operator never saw
in the schema). The schema itself (types, required, enums, bounds, nesting: JSON Schema 2020-12
by ``jsonschema``) is the spec's validator, run before any decision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

__all__ = ["arguments_type", "schema_validator"]


def arguments_type(type_name: str, schema: dict[str, Any]) -> type[msgspec.Struct]:
    """A frozen Struct with one optional field per declared property (unknown ones refused)."""
    props = schema.get("properties")
    names = sorted(props) if isinstance(props, dict) else []
    fields = [(f"p{i}", Any, msgspec.UNSET) for i in range(len(names))]
    struct: type[msgspec.Struct] = msgspec.defstruct(
        type_name,
        fields,
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
        omit_defaults=True,
        rename={f"p{i}": name for i, name in enumerate(names)},
    )
    return struct


def schema_validator(schema: dict[str, Any]) -> Callable[[Any], None]:
    """A check raising ValueError that names the first failing field as ``$.a.b``.

    A schema that is not valid JSON Schema raises ValueError here (the tool is then
    unavailable with that reason)."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(
            f"the server's input schema is not valid JSON Schema: {exc.message}"
        ) from None
    validator = cls(schema)

    def check(value: Any) -> None:
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is not None:
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.path)
            raise ValueError(f"{error.message} - at `${path}`")

    return check
