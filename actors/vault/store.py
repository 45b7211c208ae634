"""The vault's values, encrypted at rest, and its one writer (:class:`Vault`).

Values live in ``<data dir>/vault/``, one file per secret and revision, each AES-256-GCM
(``cryptography``'s ``AESGCM``) with a fresh 96-bit nonce and the secret's name and revision as
associated data: a file copied over another name's or revision's fails to decrypt instead of
handing one secret out as another (Fernet has no associated data, hence AES-GCM). The 256-bit
key is a file of its own, ``[vault] key_file`` (default ``<data dir>/vault.key``), created
0600 on first use and refused when anyone but its owner may read it; it is never on the
journal, so an export or a copy of the journal carries names and revisions only, and a copy of
the data dir without the key file carries no readable value.

:class:`Vault` holds the folded :class:`~actors.vault.state.VaultState` and the current values
(decrypted once, at open and on each change): resolving a handle is a dictionary lookup, and
:meth:`Vault.terms` is every value (the previous :data:`RETIRED_KEPT` revisions of each secret
too, so a rotated-out value stays redacted) as exact-match redaction terms. Each change writes
the value first and appends its event second (a file without an event is an orphan that the
next write of that revision replaces); a delete appends first and erases second (files of a
deleted secret are erased again at the next open).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from actors.aggregate import fold
from actors.stream import OwnedStream, Recorded, recorded
from actors.vault import state as vault_state
from actors.vault.decide import VaultError, deletion, rotation, setting
from actors.vault.info import SecretInfo
from actors.vault.state import SecretRecord, VaultState, stream_of
from events import JournalPort, JournalReadPort
from events.catalog import VAULT_KINDS, VaultSecretDeleted, VaultSecretRotated, VaultSecretSet
from events.redaction.terms import ExactTerms
from tools.handles import MissingSecret

VaultEvent = VaultSecretSet | VaultSecretRotated | VaultSecretDeleted
KEY_BYTES = 32
RETIRED_KEPT = 3
"""Rotated-out revisions kept per secret, as redaction terms only (never resolved)."""


class VaultKeyError(VaultError):
    """The key file cannot be made or used (unreadable, wrong size, readable by others)."""


def load_key(path: Path) -> bytes:
    """The vault key at ``path``, made (0600, parents 0700) when there is none."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise VaultKeyError(f"vault key file {path}: cannot be created ({exc.strerror})") from None
    else:
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(KEY_BYTES))
            out.flush()
            os.fsync(out.fileno())
    try:
        fd = os.open(path, os.O_RDONLY)  # a secrets mount's file may be a symlink
    except OSError as exc:
        raise VaultKeyError(f"vault key file {path}: cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(source.fileno())
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise VaultKeyError(
                f"vault key file {path}: group or others may access it "
                f"(mode {stat.S_IMODE(info.st_mode):o}); chmod 600 it"
            )
        key = source.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise VaultKeyError(f"vault key file {path}: is not a {KEY_BYTES}-byte key")
    return key


class SecretBox:
    """The encrypted files of ``directory``, under one key."""

    def __init__(self, directory: Path, key: bytes) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory = directory
        self._aead = AESGCM(key)

    def _path(self, name: str, revision: int) -> Path:
        return self.directory / f"{name}.{revision}"

    @staticmethod
    def _aad(name: str, revision: int) -> bytes:
        return f"reel.vault/{name}/{revision}".encode()

    def write(self, name: str, revision: int, value: str) -> None:
        """Encrypt ``value`` as ``name`` at ``revision``, durably (written, synced, renamed)."""
        nonce = secrets.token_bytes(12)
        sealed = nonce + self._aead.encrypt(nonce, value.encode(), self._aad(name, revision))
        path = self._path(name, revision)
        staging = path.with_name(f".{path.name}.tmp")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(sealed)
            out.flush()
            os.fsync(out.fileno())
        os.replace(staging, path)
        dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def read(self, name: str, revision: int) -> str | None:
        """The value of ``name`` at ``revision``, or None (no such file, or it does not
        decrypt under this key with this name and revision)."""
        try:
            sealed = self._path(name, revision).read_bytes()
        except OSError:
            return None
        try:
            return self._aead.decrypt(sealed[:12], sealed[12:], self._aad(name, revision)).decode()
        except (InvalidTag, ValueError):
            return None

    def erase(self, name: str, keep: Callable[[int], bool] = lambda _revision: False) -> None:
        """Remove the files of ``name`` whose revision ``keep`` does not keep."""
        for path in self.directory.glob(f"{name}.*"):
            stem, _, revision = path.name.rpartition(".")
            if stem == name and revision.isdigit() and not keep(int(revision)):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


class Vault:
    """The vault of one data dir: its state, its current values, and the one writer of its
    streams. Thread-safe: tool actors resolve handles (dictionary reads) while the API changes
    secrets (one change at a time, under the lock)."""

    def __init__(self, box: SecretBox, state: VaultState) -> None:
        self._box = box
        self._lock = threading.Lock()
        self._state = state
        self._values: dict[str, str] = {}
        self._retired: dict[str, list[str]] = {}
        for record in state.secrets.values():
            self._load(record)
        self._terms = self._build_terms()

    @property
    def state(self) -> VaultState:
        return self._state

    # --- reading --------------------------------------------------------------------------

    def resolve(self, name: str) -> str:
        """The current value of ``name``; :class:`MissingSecret` when there is none (a
        :data:`tools.handles.Secrets` lookup)."""
        value = self._values.get(name)
        if value is None:
            raise MissingSecret(name)
        return value

    def has(self, name: str) -> bool:
        """Whether a handle naming ``name`` resolves now."""
        return name in self._values

    def terms(self) -> ExactTerms:
        """Every current and recently retired value, as exact-match redaction terms."""
        return self._terms

    def list(self) -> list[SecretInfo]:
        """Every secret that exists, by name (never a value)."""
        return [self._info(r) for r in self._state.live()]

    def info(self, name: str) -> SecretInfo | None:
        record = self._state.get(name)
        return None if record is None else self._info(record)

    # --- writing --------------------------------------------------------------------------

    def set(self, journal: JournalPort, name: str, value: str, *, by: str) -> SecretInfo:
        """Make the secret ``name`` (:func:`~actors.vault.decide.setting`), as ``by``."""
        with self._lock:
            event = setting(self._state, name, value)
            self._box.write(name, event.revision, value)
            return self._commit(journal, event, by, value)

    def rotate(self, journal: JournalPort, name: str, value: str, *, by: str) -> SecretInfo:
        """Give ``name`` a new value (:func:`~actors.vault.decide.rotation`), as ``by``."""
        with self._lock:
            event = rotation(self._state, name, value)
            self._box.write(name, event.revision, value)
            return self._commit(journal, event, by, value)

    def delete(self, journal: JournalPort, name: str, *, by: str) -> SecretInfo:
        """Delete ``name`` and erase its values (:func:`~actors.vault.decide.deletion`)."""
        with self._lock:
            event = deletion(self._state, name)
            return self._commit(journal, event, by, None)

    def _commit(
        self, journal: JournalPort, event: VaultEvent, by: str, value: str | None
    ) -> SecretInfo:
        name, revision = event.name, event.revision
        old = self._state.secrets.get(name)
        owned = OwnedStream(
            journal, stream_of(name), principal=by, correlation_id=None, causation_id=None
        )
        try:
            records = owned.append(old.next_seq if old is not None else 0, event)
        except BaseException:
            if value is not None:
                self._box.erase(name, keep=lambda r: r != revision)
            raise
        for rec in records:
            self._fold(rec)
        record = self._state.secrets[name]
        return self._info(record)

    def _fold(self, rec: Recorded) -> None:
        """Fold one record, update the values it changes and the redaction terms."""
        self._state = vault_state.apply(self._state, rec)
        name = getattr(rec.event, "name", None)
        record = self._state.secrets.get(name) if isinstance(name, str) else None
        if record is None:
            return
        self._load(record)
        self._terms = self._build_terms()

    def _load(self, record: SecretRecord) -> None:
        name = record.name
        if record.deleted:
            self._values.pop(name, None)
            self._retired.pop(name, None)
            self._box.erase(name)
            return
        value = self._box.read(name, record.revision)
        if value is None:
            self._values.pop(name, None)
        else:
            self._values[name] = value
        retired = [
            old
            for revision in range(max(1, record.revision - RETIRED_KEPT), record.revision)
            if (old := self._box.read(name, revision)) is not None
        ]
        self._retired[name] = retired
        self._box.erase(name, keep=lambda r: record.revision - RETIRED_KEPT <= r <= record.revision)

    def _build_terms(self) -> ExactTerms:
        return ExactTerms(
            [*self._values.values(), *(v for old in self._retired.values() for v in old)]
        )

    def _info(self, record: SecretRecord) -> SecretInfo:
        return SecretInfo(
            name=record.name,
            revision=record.revision,
            created_at_ms=record.created_at_ms,
            updated_at_ms=record.updated_at_ms,
            updated_by=record.updated_by,
            readable=record.name in self._values,
        )


def vault_dir(data_dir: Path) -> Path:
    """Where the encrypted values are: ``<data dir>/vault``."""
    return data_dir / "vault"


def key_path(data_dir: Path, key_file: str) -> Path:
    """The key file: ``key_file`` (``[vault] key_file``) or ``<data dir>/vault.key``."""
    return Path(key_file).expanduser() if key_file else data_dir / "vault.key"


def open_vault(reader: JournalReadPort, data_dir: Path, key_file: str = "") -> Vault:
    """The vault of ``data_dir``: its ``vault.*`` events folded, its values decrypted with the
    key of ``key_file`` (made when there is none). Raises :class:`VaultKeyError`."""
    box = SecretBox(vault_dir(data_dir), load_key(key_path(data_dir, key_file)))
    state = fold(vault_state, recorded(reader.events_of_kinds(VAULT_KINDS)))
    return Vault(box, state or VaultState())
