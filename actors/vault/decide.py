"""What the vault appends for a request: pure functions of its state, raising a
:class:`VaultError` (nothing appended) for what the rules refuse.

The rules: a name matches ``events.fields.VAULT_NAME`` and does not look like a secret; a value
is text of :data:`events.redaction.terms.MIN_FORM_CHARS` to :data:`MAX_VALUE_BYTES` bytes with
no NUL (an exact-match redaction term must be long enough not to match ordinary text); ``set``
makes a secret that does not exist, ``rotate`` and ``delete`` need one that does.
"""

from __future__ import annotations

from actors.vault.state import VaultState
from events.catalog import VaultSecretDeleted, VaultSecretRotated, VaultSecretSet
from events.fields import VAULT_NAME
from events.redaction.terms import MIN_FORM_CHARS

MAX_VALUE_BYTES = 16 * 1024
"""The longest value the vault keeps (a private key fits; a file of secrets does not)."""


class VaultError(Exception):
    """A vault request the rules refuse; nothing was appended."""


class InvalidSecret(VaultError, ValueError):
    """A name or value is malformed; ``field`` names which (``name`` or ``value``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class SecretExists(VaultError):
    """``set`` of a name that exists: rotate it instead."""


class UnknownSecret(VaultError, LookupError):
    """No secret of this name exists."""


def check_name(name: str) -> str:
    """``name`` if the vault may hold it, else :class:`InvalidSecret` (never quoting it whole:
    a value pasted in its place must not reach an error or a log)."""
    from events.redaction.redact import looks_secret  # the detectors cost a tenth of a second

    problem = VAULT_NAME.problem(name, looks_secret)
    if problem is not None:
        raise InvalidSecret("name", problem)
    return name


def check_value(value: str) -> str:
    """``value`` if the vault may hold it, else :class:`InvalidSecret` naming ``value``."""
    size = len(value.encode("utf-8", "surrogatepass"))
    if len(value) < MIN_FORM_CHARS:
        raise InvalidSecret(
            "value", f"is {len(value)} characters; at least {MIN_FORM_CHARS} are required"
        )
    if size > MAX_VALUE_BYTES:
        raise InvalidSecret("value", f"is {size} bytes; at most {MAX_VALUE_BYTES} are kept")
    if "\0" in value:
        raise InvalidSecret("value", "holds a NUL character")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidSecret("value", "is not valid UTF-8 text") from None
    return value


def setting(state: VaultState, name: str, value: str) -> VaultSecretSet:
    """``vault.secret_set`` for a new secret (revision one past a deleted one's)."""
    check_name(name)
    check_value(value)
    old = state.secrets.get(name)
    if old is not None and not old.deleted:
        raise SecretExists(f"secret {name!r} exists: rotate it to change its value")
    return VaultSecretSet(name=name, revision=1 if old is None else old.revision + 1)


def rotation(state: VaultState, name: str, value: str) -> VaultSecretRotated:
    """``vault.secret_rotated``: the next revision of an existing secret."""
    check_name(name)
    check_value(value)
    return VaultSecretRotated(name=name, revision=_existing(state, name) + 1)


def deletion(state: VaultState, name: str) -> VaultSecretDeleted:
    """``vault.secret_deleted`` of an existing secret."""
    check_name(name)
    return VaultSecretDeleted(name=name, revision=_existing(state, name))


def _existing(state: VaultState, name: str) -> int:
    record = state.get(name)
    if record is None:
        raise UnknownSecret(f"no secret named {name!r}")
    return record.revision
