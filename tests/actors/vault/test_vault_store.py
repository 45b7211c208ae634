"""The vault's store on a real journal: values encrypted at rest and bound to their name and
revision, the key file's mode, the fold after a reopen, retired revisions, and the rules."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.aggregate import fold
from actors.stream import recorded
from actors.vault import state as vault_state
from actors.vault.decide import InvalidSecret, SecretExists, UnknownSecret
from actors.vault.store import RETIRED_KEPT, Vault, VaultKeyError, load_key, open_vault
from events import Journal, NodeKey
from events.catalog import VAULT_KINDS
from tools.handles import MissingSecret

VALUE = "correct-horse-battery-staple-42"


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    j = Journal(tmp_path / "journal.db", node_key=NodeKey.load_or_create(tmp_path / "node.key"))
    try:
        yield j
    finally:
        j.close()


def vault_of(journal: Journal, data: Path) -> Vault:
    return open_vault(journal, data)


def test_a_value_is_encrypted_at_rest_and_read_back_after_a_reopen(
    journal: Journal, tmp_path: Path
) -> None:
    vault = vault_of(journal, tmp_path)
    info = vault.set(journal, "gh", VALUE, by="user:ana")
    assert (info.revision, info.updated_by, info.readable) == (1, "user:ana", True)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert VALUE.encode() not in path.read_bytes(), path
    again = vault_of(journal, tmp_path)
    assert again.resolve("gh") == VALUE
    assert again.state == fold(vault_state, recorded(journal.events_of_kinds(VAULT_KINDS)))
    with pytest.raises(MissingSecret):
        again.resolve("other")


def test_a_file_moved_to_another_name_does_not_decrypt(journal: Journal, tmp_path: Path) -> None:
    vault = vault_of(journal, tmp_path)
    vault.set(journal, "gh", VALUE, by="cli")
    vault.set(journal, "other", "another-value-9", by="cli")
    shutil.copy(tmp_path / "vault" / "gh.1", tmp_path / "vault" / "other.1")
    again = vault_of(journal, tmp_path)
    assert not again.has("other")
    assert [(s.name, s.readable) for s in again.list()] == [("gh", True), ("other", False)]


def test_the_key_file_is_private_and_refused_when_it_is_not(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "vault.key"
    made = load_key(key)
    assert len(made) == 32 and key.stat().st_mode & 0o777 == 0o600
    assert load_key(key) == made
    os.chmod(key, 0o640)
    with pytest.raises(VaultKeyError, match="chmod 600"):
        load_key(key)
    os.chmod(key, 0o600)
    key.write_bytes(b"short")
    with pytest.raises(VaultKeyError, match="32-byte"):
        load_key(key)


def test_a_wrong_key_leaves_every_secret_unreadable(journal: Journal, tmp_path: Path) -> None:
    vault_of(journal, tmp_path).set(journal, "gh", VALUE, by="cli")
    other = open_vault(journal, tmp_path, str(tmp_path / "elsewhere.key"))
    assert [s.readable for s in other.list()] == [False]
    assert not other.has("gh")


def test_rotation_keeps_the_last_revisions_as_redaction_terms_only(
    journal: Journal, tmp_path: Path
) -> None:
    vault = vault_of(journal, tmp_path)
    values = [f"value-number-{i}-xyz" for i in range(6)]
    vault.set(journal, "gh", values[0], by="cli")
    for value in values[1:]:
        vault.rotate(journal, "gh", value, by="cli")
    assert vault.resolve("gh") == values[-1]
    kept = sorted(p.name for p in (tmp_path / "vault").iterdir())
    assert kept == [f"gh.{r}" for r in range(6 - RETIRED_KEPT, 7)]
    text = " ".join(values)
    scrubbed, count = vault.terms().scrub(text)
    assert count == RETIRED_KEPT + 1
    assert values[0] in scrubbed and values[-1] not in scrubbed
    reopened = vault_of(journal, tmp_path)
    assert reopened.terms().scrub(text) == (scrubbed, count)


def test_delete_erases_the_values_and_a_set_starts_the_next_revision(
    journal: Journal, tmp_path: Path
) -> None:
    vault = vault_of(journal, tmp_path)
    vault.set(journal, "gh", VALUE, by="cli")
    vault.rotate(journal, "gh", "another-value-9", by="cli")
    assert vault.delete(journal, "gh", by="cli").revision == 2
    assert list((tmp_path / "vault").iterdir()) == []
    assert not vault.has("gh") and vault.list() == []
    assert vault.terms().scrub(VALUE) == (VALUE, 0)
    assert vault.set(journal, "gh", VALUE, by="cli").revision == 3


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda v, j: v.set(j, "gh", VALUE, by="cli"), SecretExists),
        (lambda v, j: v.rotate(j, "absent", VALUE, by="cli"), UnknownSecret),
        (lambda v, j: v.delete(j, "absent", by="cli"), UnknownSecret),
        (lambda v, j: v.set(j, "", VALUE, by="cli"), InvalidSecret),
        (lambda v, j: v.set(j, "a/b", VALUE, by="cli"), InvalidSecret),
        (lambda v, j: v.set(j, "new", "short", by="cli"), InvalidSecret),
        (lambda v, j: v.set(j, "new", "nul\0in-the-value", by="cli"), InvalidSecret),
        (lambda v, j: v.rotate(j, "gh", "\ud800-lone-surrogate", by="cli"), InvalidSecret),
    ],
)
def test_a_refused_request_appends_and_writes_nothing(
    journal: Journal, tmp_path: Path, call: object, error: type[Exception]
) -> None:
    vault = vault_of(journal, tmp_path)
    vault.set(journal, "gh", VALUE, by="cli")
    files, head = sorted((tmp_path / "vault").iterdir()), journal.head()
    with pytest.raises(error):
        call(vault, journal)  # type: ignore[operator]
    assert sorted((tmp_path / "vault").iterdir()) == files
    assert journal.head() == head
    assert vault.resolve("gh") == VALUE
