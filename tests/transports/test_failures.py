"""One failures table (transports/failures.py): every exception class of every package tree has
a kind, every kind an answer on every edge, and each package's ``__init__`` names its classes.

The classes are found by importing every module of the six packages, so a new exception class
fails here until it is given a kind and documented; a table entry naming no class fails too.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from types import ModuleType

import pytest

from actors import (
    ApprovalAlreadyResolved,
    IllegalTransition,
    InvalidCommand,
    NodeDraining,
    SessionKeyTaken,
    UnknownRun,
)
from events import AppendRejected, JournalClosed, JournalTampered
from policies import PolicyRequestError
from transports.channels.commands import OUTCOME
from transports.cli.errors import EXITS
from transports.failures import ALL_KINDS, ANSWERS, KINDS, kind_of, kind_of_class, public
from transports.grpc.status import STATUS as GRPC
from transports.grpc.status import to_grpc_error
from transports.http.failures import STATUS as HTTP
from transports.http.failures import to_api_error

PACKAGES = ("events", "actors", "tools", "policies", "projections", "transports")


def _modules() -> list[ModuleType]:
    found = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            found.append(importlib.import_module(info.name))
    return found


def _dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in reel's packages, by dotted name (private ones, whose
    name starts with ``_``, never leave their module)."""
    out: dict[str, type[BaseException]] = {}
    for module in _modules():
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                out[_dotted(value)] = value
    return out


CLASSES = _exception_classes()


def test_the_walk_finds_the_trees() -> None:
    """A walk that found nothing would prove nothing."""
    for root in ("JournalError", "ActorsError", "ToolsError", "PolicyError", "AccessError"):
        assert any(name.endswith(f".{root}") for name in CLASSES), root
    assert len(CLASSES) > 60


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_exception_class_has_a_kind(name: str) -> None:
    cls = CLASSES[name]
    if name in ANSWERS:
        assert kind_of_class(cls) is None, f"{name} is an edge's answer: it takes no kind"
        return
    kind = kind_of_class(cls)
    assert kind is not None, f"{name} has no kind: give it (or an ancestor) one in KINDS"
    assert kind in ALL_KINDS


def test_every_table_entry_names_an_exception_class() -> None:
    for name in (*KINDS, *ANSWERS):
        module, _, attr = name.rpartition(".")
        loaded = sys.modules.get(module) or importlib.import_module(module)
        cls = getattr(loaded, attr, None)
        assert inspect.isclass(cls) and issubclass(cls, BaseException), name
        assert _dotted(cls) == name, f"{name} is {_dotted(cls)}: list it where it is defined"


@pytest.mark.parametrize(
    ("edge", "table"),
    [("HTTP", HTTP), ("gRPC", GRPC), ("CLI", EXITS), ("channels", OUTCOME)],
)
def test_every_kind_has_an_answer_on_every_edge(edge: str, table: dict[str, object]) -> None:
    assert set(table) == set(ALL_KINDS), edge


@pytest.mark.parametrize("name", sorted(set(CLASSES) - ANSWERS))
def test_each_package_documents_its_tree(name: str) -> None:
    """The class is named in the docstring of its package, or of the subpackage it is in."""
    parts = name.split(".")[:-2]  # the packages holding the module
    docs = [sys.modules[".".join(parts[:i])].__doc__ or "" for i in range(1, len(parts) + 1)]
    assert any(parts and name.split(".")[-1] in doc for doc in docs), (
        f"{name} is not drawn in the exception tree of {'/'.join(parts)}/__init__.py"
    )


def test_the_edges_agree_on_what_each_kind_tells_the_caller() -> None:
    """A state that refuses is 409 / FAILED_PRECONDITION or ALREADY_EXISTS / exit 1 (a budget
    429 / RESOURCE_EXHAUSTED / exit 1); a denial
    403 / PERMISSION_DENIED / exit 3 / "denied"; the node's own trouble 5xx / UNAVAILABLE or
    INTERNAL / exit 2; any other refusal of the request 4xx / a client status / exit 2."""
    server_side = {"UNAVAILABLE", "INTERNAL"}
    for kind in ALL_KINDS:
        status, grpc, code = HTTP[kind][0], GRPC[kind].name, EXITS[kind]
        answers = (status, grpc, code, OUTCOME[kind])
        if kind in ("conflict", "already_exists"):
            assert status == 409 and grpc in ("FAILED_PRECONDITION", "ALREADY_EXISTS"), answers
            assert code == 1, answers
        elif kind == "budget_exceeded":  # a valid command the budget's state refuses
            assert answers == (429, "RESOURCE_EXHAUSTED", 1, "failed")
        elif kind == "permission_denied":
            assert answers == (403, "PERMISSION_DENIED", 3, "denied")
        elif status >= 500:
            assert grpc in server_side and code == 2, answers
        else:
            assert 400 <= status < 500 and grpc not in server_side and code == 2, answers
        assert kind == "permission_denied" or OUTCOME[kind] == "failed", answers


def test_an_unclassified_exception_is_internal_and_says_nothing() -> None:
    """A bug's message may hold anything: the API says "internal error" and the CLI leaves it
    to its own last resort."""
    failure = public(RuntimeError("token reel_secret in a message"))
    assert failure == ("internal", "internal error", None)
    assert kind_of(RuntimeError("x")) is None


SAMPLES = (
    InvalidCommand("text", "the message is empty"),
    UnknownRun("no run with id 'x'"),
    ApprovalAlreadyResolved("approval x is already resolved"),
    SessionKeyTaken("session_key 'k' is already in use"),
    NodeDraining("the node is shutting down"),
    IllegalTransition("run cannot go from completed to running"),
    JournalClosed("the journal is closed"),
    JournalTampered("row 7 was altered", kind="hash", position=7),
    AppendRejected("the payload is 2000000 bytes"),
    PolicyRequestError("context.tool", "must be a string"),
)


@pytest.mark.parametrize("exc", SAMPLES, ids=lambda exc: type(exc).__name__)
def test_http_and_grpc_tell_a_caller_the_same_thing(exc: Exception) -> None:
    """One kind, one message on both API edges. gRPC said "internal error (IllegalTransition)"
    for an actors or journal error that HTTP calls "internal error": now both say the latter
    (the class name is in the node's log)."""
    kind = kind_of(exc)
    assert kind is not None
    api, grpc = to_api_error(exc), to_grpc_error(exc)
    assert (api.status, api.code, grpc.status) == (*HTTP[kind], GRPC[kind])
    assert api.message == grpc.message
    if kind in ("unusable", "internal"):
        assert api.message == "internal error"
