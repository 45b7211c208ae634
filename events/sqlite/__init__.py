"""The embedded journal backend: one SQLite file, hash-chained."""
