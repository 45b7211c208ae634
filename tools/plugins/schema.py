"""Turn a manifest's JSON schema into a frozen msgspec Struct.

Plugins describe their arguments as JSON schema; reel validates them with
the same msgspec machinery as the built-in tools by converting the schema to
a Struct (``forbid_unknown_fields``, optional fields omitted when absent).
Only a small, honest subset is supported, and anything else is refused
with the key's path:

- the top level: ``type = "object"``, ``properties``, ``required``,
  ``description``, ``additionalProperties = false`` (the only behaviour);
- a property: ``type`` one of string / integer / number / boolean / array /
  object, plus ``description``, ``enum`` (strings or integers),
  ``minimum`` / ``maximum`` (numbers), ``minLength`` / ``maxLength``
  (strings, arrays), ``items`` (arrays, one nested property schema);
  ``object`` properties accept any JSON object.
"""

from __future__ import annotations

import keyword
import re
from typing import Annotated, Any, Literal

import msgspec

__all__ = ["SchemaError", "struct_from_schema"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOP_KEYS = frozenset(
    {"type", "properties", "required", "description", "additionalProperties", "title"}
)
_PROP_KEYS = frozenset(
    {"type", "description", "enum", "minimum", "maximum", "minLength", "maxLength", "items"}
)
_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool}


class SchemaError(ValueError):
    """A schema outside the supported subset; the message starts with the key path."""


def struct_from_schema(type_name: str, schema: dict[str, Any]) -> type[msgspec.Struct]:
    """A frozen Struct type accepting exactly the objects ``schema`` describes."""
    _only(schema, _TOP_KEYS, "arguments")
    if schema.get("type") != "object":
        raise SchemaError('arguments.type: must be "object"')
    if schema.get("additionalProperties", False) is not False:
        raise SchemaError("arguments.additionalProperties: only false is supported")
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        raise SchemaError("arguments.properties: must be a table")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise SchemaError("arguments.required: must be a list of property names")
    for name in required:
        if name not in props:
            raise SchemaError(f"arguments.required: {name!r} is not a property")
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for name, prop in props.items():
        where = f"arguments.properties.{name}"
        if not _IDENT.match(name) or keyword.iskeyword(name):
            raise SchemaError(f"{where}: property names must be identifiers")
        typ = _property_type(prop, where)
        fields.append((name, typ) if name in required else (name, typ | None, None))
    fields.sort(key=lambda f: len(f) == 3)  # required first
    struct: type[msgspec.Struct] = msgspec.defstruct(
        type_name,
        fields,
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
        omit_defaults=True,
    )
    return struct


def _property_type(prop: Any, where: str) -> Any:
    if not isinstance(prop, dict):
        raise SchemaError(f"{where}: must be a table")
    _only(prop, _PROP_KEYS, where)
    kind = prop.get("type")
    base: Any
    if "enum" in prop:
        values = prop["enum"]
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str | int) and not isinstance(v, bool) for v in values)
        ):
            raise SchemaError(f"{where}.enum: must be a non-empty list of strings or integers")
        base = Literal[tuple(values)]
    elif kind in _SCALARS:
        base = _SCALARS[kind]
    elif kind == "array":
        items = prop.get("items")
        item: Any = Any if items is None else _property_type(items, f"{where}.items")
        base = list[item]
    elif kind == "object":
        base = dict[str, Any]
    else:
        raise SchemaError(f"{where}.type: unsupported {kind!r}")
    meta = _meta(prop, where, kind)
    return Annotated[base, meta] if meta is not None else base


def _meta(prop: dict[str, Any], where: str, kind: Any) -> msgspec.Meta | None:
    options: dict[str, Any] = {}
    if "description" in prop:
        options["description"] = str(prop["description"])
    for key, name, kinds in (
        ("minimum", "ge", ("integer", "number")),
        ("maximum", "le", ("integer", "number")),
        ("minLength", "min_length", ("string", "array")),
        ("maxLength", "max_length", ("string", "array")),
    ):
        if key in prop:
            if kind not in kinds or "enum" in prop:
                raise SchemaError(f"{where}.{key}: not allowed for type {kind!r}")
            options[name] = prop[key]
    try:
        return msgspec.Meta(**options) if options else None
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"{where}: {exc}") from None


def _only(table: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise SchemaError(f"{where}.{key}: unsupported schema keyword")
