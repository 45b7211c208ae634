"""The vault: secrets a tool call names by handle (docs/vault.md). ``state.py`` folds the
``vault.*`` events, ``decide.py`` decides them, ``store.py`` keeps the values encrypted and is
the one writer.

Exceptions (their failure kinds are in :mod:`transports.failures`)::

    VaultError                  a vault request refused; nothing appended
    ├── InvalidSecret           a malformed name or value; .field names which
    ├── SecretExists            set of a name that exists (rotate it)
    ├── UnknownSecret           no secret of that name
    └── VaultKeyError           the key file cannot be made or used
"""
