"""One home per fact: each guard fails when someone writes a fact a second time.

- a dotted event kind is written only in ``events/catalog.py`` (everything else asks it:
  ``kind_of(RunAccepted)``, ``kinds_of(...)``, or a constant it exports);
- a closed set the catalog stores (approval scopes, grant matches, verdicts, postures, memory
  scopes, learning statuses, ...) is a named type of the catalog, never a second ``Literal`` or
  tuple of the same words;
- a default the actors run with is written only in the actors' config Structs
  (``transports/config.py`` embeds them or names their values);
- the gRPC scope and match tables are written once (``transports/grpc/tape.py``);
- a view is folded only by its own ``apply``: an offline read runs it in memory
  (``projections.base.folded``), never a second fold beside it;
- a public class name is defined once in the project and its tests (a reader who finds
  ``TapeEntry`` finds one class).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from events.catalog import BY_KIND
from policies.access import ACTIONS

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("actors", "events", "policies", "projections", "tools", "transports")
CATALOG = ROOT / "events" / "catalog.py"


def sources(*packages: str) -> Iterator[Path]:
    for package in packages or PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


# --- event kinds ------------------------------------------------------------------------------

QUOTED = re.compile(r"""["']([a-z_]+\.[a-z_]+)["']""")
ACTION_NAMES = frozenset(ACTIONS) & frozenset(BY_KIND)
"""Cedar action names that are spelled like a kind: another vocabulary (the policy schema's
actions), written in policies/access.py and the transports that ask for them."""


def test_a_cedar_action_is_named_like_a_kind_only_where_known() -> None:
    assert {"session.reset"} == ACTION_NAMES


def test_event_kinds_are_written_only_in_the_catalog() -> None:
    kinds = frozenset(BY_KIND) - ACTION_NAMES
    found = [
        f"{where(path, n)}: {m.group(1)}"
        for path in sources()
        if path != CATALOG
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for m in QUOTED.finditer(line)
        if m.group(1) in kinds
    ]
    assert not found, "kinds written outside events/catalog.py:\n" + "\n".join(found)


def test_the_guard_sees_a_kind_written_twice() -> None:
    assert [m.group(1) for m in QUOTED.finditer('if kind == "run.accepted":')] == ["run.accepted"]


# --- closed sets ------------------------------------------------------------------------------

LAYERED = {
    ("tools/spec.py", frozenset({"always_allow", "ask_each_time", "disabled"})),
    ("tools/memory_tools.py", frozenset({"principal", "session", "global"})),
    ("policies/request.py", frozenset({"always_allow", "ask_each_time", "disabled"})),
    ("policies/decision.py", frozenset({"allow", "deny", "approval_required"})),
}
"""Copies the layering forces: ``tools`` and ``policies`` may not import ``events`` (nor each
other), so a tool's posture, a memory tool's scope and Cedar's outcome are written there too."""


def word_sets(
    tree: ast.AST, *, literals_only: bool = False
) -> Iterator[tuple[int, frozenset[str]]]:
    """Each ``Literal[...]`` of two or more words, and (unless ``literals_only``) each tuple,
    list or set display of two or more words, with its line."""
    in_literal: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and (
            getattr(node.value, "id", None) == "Literal"
            or getattr(node.value, "attr", None) == "Literal"
        ):
            elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            in_literal.add(id(node.slice))
            words = [e.value for e in elements if isinstance(e, ast.Constant)]
            strings = [w for w in words if isinstance(w, str)]
            if len(words) >= 2 and len(strings) == len(words):
                yield node.lineno, frozenset(strings)
    if literals_only:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set) and id(node) not in in_literal:
            words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            strings = [w for w in words if isinstance(w, str)]
            if len(strings) == len(node.elts) >= 2:
                yield node.lineno, frozenset(strings)


def catalog_sets() -> set[frozenset[str]]:
    return {words for _, words in word_sets(ast.parse(CATALOG.read_text()), literals_only=True)}


def test_closed_sets_of_the_catalog_are_written_only_there() -> None:
    sets = catalog_sets()
    assert frozenset({"once", "session", "always"}) in sets  # the guard reads the catalog
    found: set[tuple[str, frozenset[str]]] = set()
    lines: list[str] = []
    for path in sources():
        if path == CATALOG:
            continue
        for line, words in word_sets(ast.parse(path.read_text())):
            if words in sets:
                found.add((str(path.relative_to(ROOT)), words))
                lines.append(f"{where(path, line)}: {sorted(words)}")
    second = sorted(f for f in lines if not any(f.startswith(p + ":") for p, _ in LAYERED))
    assert not second, "closed sets of the catalog written again:\n" + "\n".join(second)
    assert found == LAYERED, f"the layered copies changed: {found ^ LAYERED}"


def test_a_word_set_display_is_seen() -> None:
    tree = ast.parse('if scope not in ("once", "session", "always"): pass')
    assert [w for _, w in word_sets(tree)] == [frozenset({"once", "session", "always"})]


# --- config defaults --------------------------------------------------------------------------


def fed_to_the_actors() -> set[tuple[str, str]]:
    """Every (section, key) that ``NodeConfig.actors()`` passes to the actors' config."""
    tree = ast.parse((ROOT / "transports" / "config.py").read_text())
    (actors,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "actors"
    ]
    fed = set()
    for node in ast.walk(actors):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and getattr(node.value.value, "id", None) == "self"
        ):
            fed.add((node.value.attr, node.attr))
    return fed


def section_classes() -> dict[str, ast.ClassDef]:
    """``NodeConfig``'s sections, by name, as the classes that declare them."""
    tree = ast.parse((ROOT / "transports" / "config.py").read_text())
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    out = {}
    for stmt in classes["NodeConfig"].body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            annotation = ast.unparse(stmt.annotation)
            if annotation in classes:
                out[stmt.target.id] = classes[annotation]
    return out


def test_the_actors_defaults_are_written_only_in_the_actors_config() -> None:
    fed = fed_to_the_actors()
    assert ("approvals", "timeout_s") in fed and ("runs", "max_turns") in fed
    sections = section_classes()
    written = []
    for section, key in sorted(fed):
        for stmt in sections[section].body:
            if (
                isinstance(stmt, ast.AnnAssign)
                and getattr(stmt.target, "id", None) == key
                and stmt.value is not None
                and any(
                    (isinstance(n, ast.Constant) and not isinstance(n.value, str | type(None)))
                    or (isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value)
                    for n in ast.walk(stmt.value)
                )
            ):
                written.append(f"{section}.{key} = {ast.unparse(stmt.value)}")
    assert not written, "defaults written again in transports/config.py: " + ", ".join(written)


def test_the_sections_have_the_actors_defaults() -> None:
    from actors import ActorsConfig
    from transports.config import NodeConfig

    assert NodeConfig().actors() == ActorsConfig()


# --- gRPC tables ------------------------------------------------------------------------------

WIRE_ENTRY = re.compile(r"(ApprovalScope|GrantMatch)\.[A-Z]+\s*:|:\s*(ApprovalScope|GrantMatch)\.")


def test_the_grpc_scope_and_match_tables_are_written_once() -> None:
    home = ROOT / "transports" / "grpc" / "tape.py"
    found = [
        f"{where(path, n)}: {line.strip()}"
        for path in sources("transports")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if WIRE_ENTRY.search(line)
    ]
    elsewhere = [f for f in found if not f.startswith("transports/grpc/tape.py:")]
    assert not elsewhere, "gRPC scope or match tables written again:\n" + "\n".join(elsewhere)
    assert len(found) == 2, found  # the home: unspecified means once, and means any
    assert "SCOPES" in home.read_text()


# --- one fold per view ------------------------------------------------------------------------

OVERLAYS = {("projections/watch.py", "WatchReads")}
"""Reads that look at the latest events the views may not have applied yet (a task's last
heartbeat): an overlay on a view's row, not a fold of the view."""


def test_a_view_is_folded_only_by_its_own_apply() -> None:
    """In projections/, an event class is matched only inside a projection (a class with its
    ``kinds`` and ``apply``): a function folding the journal into a view's records beside it is
    a second fold."""
    names = {cls.__name__ for cls in BY_KIND.values()}
    found = []
    for path in sources("projections"):
        tree = ast.parse(path.read_text())
        for cls in [None, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
            scope: ast.AST = tree if cls is None else cls
            is_view = cls is not None and {"kinds", "apply"} <= {
                getattr(s, "name", None) or getattr(getattr(s, "target", None), "id", None)
                for s in cls.body
            }
            inner = {
                id(n)
                for c in ast.walk(scope)
                if c is not scope and isinstance(c, ast.ClassDef)
                for n in ast.walk(c)
            }
            for node in ast.walk(scope):
                if id(node) in inner or not isinstance(node, ast.Call):
                    continue
                if getattr(node.func, "id", None) != "isinstance" or len(node.args) != 2:
                    continue
                matched = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                owner = (str(path.relative_to(ROOT)), cls.name if cls else "")
                if matched & names and not is_view and owner not in OVERLAYS:
                    found.append(f"{where(path, node.lineno)}: {sorted(matched & names)}")
    assert not found, "events folded outside a view's apply:\n" + "\n".join(found)


# --- class names ------------------------------------------------------------------------------

TWICE_ON_PURPOSE = {
    # The event (``events.catalog``) and the 202 body of ``POST /v1/sessions/{id}/messages``
    # (``transports.http.bodies``): the OpenAPI document names the body ``RunStarted`` and the
    # event ``RunStartedEvent``, and generated clients name their classes after those.
    "RunStarted",
}


def class_homes(paths: list[Path]) -> dict[str, list[str]]:
    """Each public class name defined at module level in ``paths``, with where."""
    homes: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                homes.setdefault(node.name, []).append(f"{shown}:{node.lineno}")
    return homes


def test_a_public_class_name_is_defined_once() -> None:
    # The generated gRPC messages (proto/) mirror the API's names by design.
    paths = [
        *sources(),
        *sorted((ROOT / "tests").rglob("*.py")),
        *sorted((ROOT / "bench").rglob("*.py")),
    ]
    twice = {
        name: homes
        for name, homes in class_homes(paths).items()
        if len(homes) > 1 and name not in TWICE_ON_PURPOSE
    }
    assert not twice


def test_the_class_name_guard_sees_a_second_definition(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Tape:\n    pass\n")
    (tmp_path / "b.py").write_text("class Tape:\n    pass\n\n\nclass _Private:\n    pass\n")
    homes = class_homes([tmp_path / "a.py", tmp_path / "b.py"])
    assert len(homes["Tape"]) == 2 and "_Private" not in homes
