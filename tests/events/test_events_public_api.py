"""The package's public surface: ``__all__`` is complete and every exception is in the tree."""

from __future__ import annotations

import inspect

import events
import events.errors


def test_all_names_exist_and_are_unique() -> None:
    assert len(set(events.__all__)) == len(events.__all__)
    for name in events.__all__:
        assert hasattr(events, name), name


def test_every_exception_is_exported_and_drawn_in_the_tree() -> None:
    doc = events.__doc__ or ""
    for name, value in vars(events.errors).items():
        if inspect.isclass(value) and issubclass(value, Exception):
            assert name in events.__all__, name
            assert issubclass(value, events.JournalError), name
            assert name in doc, f"{name} is missing from the exception tree in events/__init__"
