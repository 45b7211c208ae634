"""The memory tools' runtime: the conformance suite over the node's real memory store (journal,
projector, FTS5 and sqlite-vec), what each tool declares, and how a call acts for its run."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from actors.memory.items import NodeMemory
from events import Journal
from events.catalog import MemoryItemWritten
from projections import MemoryView, Projector, all_projections
from tests.events.decoded import decoded
from tests.tools.tools_conformance import Call, RuntimeConformance
from tools import ExecutionContext, ToolCatalog, ToolsConfig, build_catalog
from tools.memory_tools import FoundItem, MemoryToolsRuntime

SESSION = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


class Store:
    """The node's memory over a real journal and views.db; ``fold`` brings the views up."""

    def __init__(self, root: Path) -> None:
        self.journal = Journal(root / "journal.db")
        self.views = root / "views.db"
        self.projector = Projector(self.journal, self.views, all_projections())
        self.memory = NodeMemory(MemoryView(self.views), self.journal)

    def fold(self) -> None:
        self.projector.catch_up()

    def close(self) -> None:
        self.memory.close()
        self.projector.close()
        self.journal.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    made = Store(tmp_path)
    try:
        yield made
    finally:
        made.close()


def catalog_of(store: Store | None, **config: object) -> ToolCatalog:
    memory = None if store is None else store.memory
    return ToolCatalog([MemoryToolsRuntime(ToolsConfig(**config), memory)])  # type: ignore[arg-type]


def call(
    catalog: ToolCatalog, name: str, arguments: Mapping[str, object], workspace: Path, **ctx: str
) -> tuple[bool, str, str | None]:
    context = ExecutionContext.start(workspace, 10, **ctx)  # type: ignore[arg-type]
    result = catalog.execute(name, catalog.validate(name, arguments), context)
    return result.ok, result.output, result.error


class TestMemoryConformance(RuntimeConformance):
    @pytest.fixture(autouse=True)
    def _store(self, store: Store) -> None:
        self.store = store

    def make_catalog(self, workspace: Path) -> ToolCatalog:
        return catalog_of(self.store)

    def quick_call(self, workspace: Path) -> Call:
        return ("memory.search", {"query": "anything at all"})


def test_declarations() -> None:
    catalog = build_catalog(ToolsConfig())
    search, write = catalog.spec("memory.search"), catalog.spec("memory.write")
    assert (search.risk, search.default_posture, search.capabilities) == (
        "low",
        "always_allow",
        frozenset(),
    )
    # A write is sensitive: it steers later runs, so a human approves it by default.
    assert (write.risk, write.default_posture, write.capabilities) == (
        "medium",
        "ask_each_time",
        frozenset({"memory.write"}),
    )
    assert search.unavailable is None and write.unavailable is None


def test_a_write_acts_for_the_run_and_a_search_sees_what_it_may(
    store: Store, workspace: Path
) -> None:
    catalog = catalog_of(store)
    ok, out, error = call(
        catalog,
        "memory.write",
        {"text": "Alice likes green tea", "tags": ["tea"]},
        workspace,
        principal="user:alice",
        session_id=SESSION,
        invocation_id="01ARZ3NDEKTSV4RRFFQ69G5FAW",
    )
    assert ok, error
    item_id = json.loads(out)["item_id"]
    (stored,) = store.journal.read_stream(f"memory/{item_id}")
    # Recorded as the run's principal, caused by the tool invocation, source "learned".
    assert (stored.principal, stored.causation_id) == ("user:alice", "01ARZ3NDEKTSV4RRFFQ69G5FAW")
    event = decoded(stored, MemoryItemWritten)
    assert (event.scope, event.source, event.tags) == ("principal", "learned", ("tea",))
    store.fold()
    as_alice = call(catalog, "memory.search", {"query": "green tea"}, workspace,
                    principal="user:alice")  # fmt: skip
    hits = json.loads(as_alice[1])["hits"]
    assert [h["item_id"] for h in hits] == [item_id]
    assert set(hits[0]) == set(FoundItem.__struct_fields__)
    as_bob = call(catalog, "memory.search", {"query": "green tea"}, workspace, principal="user:bob")
    assert json.loads(as_bob[1])["hits"] == []


def test_refusals_are_failed_calls_naming_the_argument(store: Store, workspace: Path) -> None:
    catalog = catalog_of(store)
    ok, _, error = call(catalog, "memory.write", {"text": "x" * 8001}, workspace,
                        principal="user:alice")  # fmt: skip
    assert not ok and error is not None and "text is 8,001 characters" in error
    many = {"text": "t", "tags": [f"t{i}" for i in range(17)]}
    ok, _, error = call(catalog, "memory.write", many, workspace, principal="user:alice")
    assert not ok and error is not None and "the cap is 16" in error
    ok, _, error = call(catalog, "memory.write", {"text": "t", "scope": "session"}, workspace,
                        principal="user:alice")  # fmt: skip
    assert not ok and error is not None and "session" in error
    ok, _, error = call(catalog, "memory.write", {"text": "t"}, workspace)
    assert not ok and error is not None and "principal" in error
    # The same refusals are known before anyone would be asked to approve the call.
    runtime = MemoryToolsRuntime(ToolsConfig(), store.memory)
    args = catalog.validate("memory.write", {"text": "x" * 8001})
    assert "the cap is 8,000" in (runtime.precheck("memory.write", args) or "")
    assert runtime.precheck("memory.write", catalog.validate("memory.write", {"text": "t"})) is None
    assert store.journal.events_of_kinds(("memory.item_written",)) == []


def test_without_the_nodes_memory_the_tools_are_listed_but_fail(workspace: Path) -> None:
    catalog = catalog_of(None)
    assert catalog.names() == ["memory.search", "memory.write"]
    ok, _, error = call(catalog, "memory.search", {"query": "x"}, workspace)
    assert not ok and error is not None and "no memory" in error


def test_hits_that_do_not_fit_the_output_cap_are_left_out(store: Store, workspace: Path) -> None:
    for n in range(6):
        call(catalog_of(store), "memory.write", {"text": f"report {n} " + "word " * 300,
             "scope": "global"}, workspace, principal="user:alice")  # fmt: skip
    store.fold()
    ok, out, _ = call(
        catalog_of(store, default_output_cap_bytes=4000),
        "memory.search",
        {"query": "report word", "k": 6},
        workspace,
    )
    body = json.loads(out)
    assert ok and body["truncated"] is True and 0 < len(body["hits"]) < 6
    assert len(out.encode()) <= 4000
