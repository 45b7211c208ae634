"""Reading, parsing and validating policy files into one pre-parsed policy set.

Cedar numbers the policies of each parse positionally (``policy0``, ``policy1``, ...), so
those ids change whenever a file gains a policy and mean nothing to an auditor. The
loader therefore gives every policy a stable id and builds the final set from Cedar's
JSON form with those ids as the policy ids, so Cedar's own diagnostics name them:

- a packaged baseline policy must carry ``@id("baseline....")`` and keeps it verbatim;
- an operator policy in ``<name>.cedar`` becomes ``<name>.<@id>``, or ``<name>.policy<N>``
  (its position in the file, from 0) when it has no ``@id``.

Every file is parsed and validated on its own, so an error names the file it is in.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Final

import cedarpy
import msgspec

from policies.context_reads import context_reads
from policies.errors import PolicyLoadError, PolicyParseError, PolicyValidationError

BASELINE_DIR: Final[Path] = Path(__file__).resolve().parent
"""Where the packaged baseline policies and the schema live."""

SCHEMA_PATH: Final[Path] = BASELINE_DIR / "schema.cedarschema"
"""The one schema every policy (baseline or operator) is validated against."""


class PolicySource(msgspec.Struct, frozen=True, kw_only=True):
    """Where one policy of the loaded set came from."""

    policy_id: str
    """Its stable id."""
    path: str
    """The file that holds it."""
    effect: str
    """``permit`` or ``forbid``."""
    operator: bool
    """True for a policy from the operator's directory."""


class LoadedPolicies(msgspec.Struct, frozen=True, kw_only=True):
    """Everything parsed at start: the schema handle, the policy set handle, and where
    each policy came from, in load order (baseline files, then operator files, each
    sorted by name)."""

    schema: cedarpy.Schema
    policy_set: cedarpy.PolicySet
    sources: tuple[PolicySource, ...]
    digest: str = ""
    """SHA-256 (hex) of the schema and the policy set as loaded (each policy by its stable id,
    formatting aside): two nodes enforce the same policies exactly when their digests match."""
    context_reads: frozenset[str] | None = None
    """The context attributes the policies read (:func:`policies.context_reads.context_reads`);
    None when one of them uses the context whole (then no decision is memoized)."""


def load_schema(path: Path = SCHEMA_PATH) -> cedarpy.Schema:
    """Parse the schema file, or raise :class:`PolicyLoadError` naming it."""
    text = _read(path)
    try:
        return cedarpy.Schema.from_str(text)
    except ValueError as exc:
        raise PolicyLoadError(path, f"schema does not parse: {exc}") from exc


def baseline_files() -> list[Path]:
    """The packaged ``*.cedar`` files, sorted by name."""
    return sorted(BASELINE_DIR.glob("*.cedar"))


def operator_files(operator_dir: Path | None) -> list[Path]:
    """The operator's ``*.cedar`` files, sorted by name. A missing directory holds none
    (a fresh data dir has no ``policies/`` yet); a path that is not a directory is an
    error. Hidden files are skipped."""
    if operator_dir is None or not operator_dir.exists():
        return []
    if not operator_dir.is_dir():
        raise PolicyLoadError(operator_dir, "operator policy path is not a directory")
    try:
        candidates = sorted(operator_dir.glob("*.cedar"))
    except OSError as exc:
        raise PolicyLoadError(operator_dir, f"cannot list directory: {exc}") from exc
    return [path for path in candidates if not path.name.startswith(".") and path.is_file()]


def load_policies(operator_dir: Path | None) -> LoadedPolicies:
    """Parse and validate the baseline and the operator's files into one policy set.

    Raises :class:`PolicyParseError` (syntax), :class:`PolicyValidationError` (schema,
    duplicate id, template) or :class:`PolicyLoadError` (unreadable file), each naming
    the file.
    """
    schema_text = _read(SCHEMA_PATH)
    schema = load_schema()
    static: dict[str, Any] = {}
    sources: list[PolicySource] = []
    files = [(path, False) for path in baseline_files()]
    files += [(path, True) for path in operator_files(operator_dir)]
    for path, operator in files:
        for policy_id, policy in _parse_file(path, schema, operator=operator):
            if policy_id in static:
                first = next(s.path for s in sources if s.policy_id == policy_id)
                raise PolicyValidationError(
                    path, f"policy id {policy_id!r} is already used by {first}"
                )
            static[policy_id] = policy
            sources.append(
                PolicySource(
                    policy_id=policy_id,
                    path=str(path),
                    effect=str(policy.get("effect", "")),
                    operator=operator,
                )
            )
    document = json.dumps({"staticPolicies": static, "templates": {}, "templateLinks": []})
    try:
        policy_set = cedarpy.PolicySet.from_json_str(document)
    except ValueError as exc:  # pragma: no cover - every part parsed on its own above
        raise PolicyLoadError(BASELINE_DIR, f"combined policy set does not build: {exc}") from exc
    digest = hashlib.sha256(
        schema_text.encode() + b"\x00" + json.dumps(static, sort_keys=True).encode()
    ).hexdigest()
    return LoadedPolicies(
        schema=schema,
        policy_set=policy_set,
        sources=tuple(sources),
        digest=digest,
        context_reads=context_reads(static.values()),
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyLoadError(path, f"cannot read file: {exc}") from exc


def _parse_file(
    path: Path, schema: cedarpy.Schema, *, operator: bool
) -> list[tuple[str, dict[str, Any]]]:
    """One file's policies as (stable id, Cedar JSON policy), after parsing and
    validating the file against the schema."""
    text = _read(path)
    try:
        document = json.loads(cedarpy.policies_to_json_str(text))
    except ValueError as exc:
        raise PolicyParseError(path, _locate_parse_error(text, str(exc))) from exc
    if document.get("templates"):
        raise PolicyValidationError(
            path, "templates (policies with ?principal / ?resource slots) are not supported"
        )
    local: dict[str, dict[str, Any]] = document.get("staticPolicies", {})
    stable = {
        local_id: _stable_id(path, local_id, policy, operator=operator)
        for local_id, policy in local.items()
    }
    result = cedarpy.validate_policies(text, schema)
    if not result.validation_passed:
        problems = [
            f"[{stable.get(error.policy_id, error.policy_id)}] {error.error}"
            if error.policy_id
            else error.error
            for error in result.errors
        ]
        raise PolicyValidationError(path, "; ".join(problems))
    ordered = sorted(local.items(), key=lambda item: _position(item[0]))
    seen: set[str] = set()
    policies: list[tuple[str, dict[str, Any]]] = []
    for local_id, policy in ordered:
        policy_id = stable[local_id]
        if policy_id in seen:
            raise PolicyValidationError(path, f"policy id {policy_id!r} is used twice")
        seen.add(policy_id)
        policies.append((policy_id, policy))
    return policies


def _stable_id(path: Path, local_id: str, policy: dict[str, Any], *, operator: bool) -> str:
    annotations = policy.get("annotations") or {}
    annotated = annotations.get("id")
    if not operator:
        if not annotated:
            raise PolicyValidationError(path, f"baseline policy {local_id} has no @id annotation")
        return str(annotated)
    return f"{path.stem}.{annotated or local_id}"


def _position(local_id: str) -> int:
    digits = local_id.removeprefix("policy")
    return int(digits) if digits.isdigit() else 0


def _locate_parse_error(text: str, message: str) -> str:
    """cedarpy's parse message carries no position; add the line of the first policy
    that does not parse, found by parsing ever longer prefixes that end at a ``;``."""
    start_line = 1
    for end, line in _statement_ends(text):
        try:
            cedarpy.policies_to_json_str(text[: end + 1])
        except ValueError:
            return f"{message} (in the policy starting at line {start_line})"
        start_line = line
    return f"{message} (in the policy starting at line {start_line})"


def _statement_ends(text: str) -> list[tuple[int, int]]:
    """Offsets of the ``;`` that end statements (outside strings and ``//`` comments),
    each with the line number of the next non-blank character after it."""
    ends: list[tuple[int, int]] = []
    in_string = in_comment = escaped = False
    line = 1
    for offset, char in enumerate(text):
        if char == "\n":
            line += 1
            in_comment = False
            continue
        if in_comment:
            continue
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char == "/" and text.startswith("//", offset):
            in_comment = True
        elif char == ";":
            ends.append((offset, line + _lines_to_next_policy(text[offset + 1 :])))
    return ends


def _lines_to_next_policy(rest: str) -> int:
    """How many lines after the current one the next policy starts: blank lines and
    ``//`` comment lines in between are not part of it."""
    lines = rest.split("\n")
    for index, line in enumerate(lines):
        stripped = line.strip()
        if index == 0:
            stripped = stripped.split("//", 1)[0].strip()
        if stripped and not stripped.startswith("//"):
            return index
    return 0
