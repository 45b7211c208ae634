"""The incremental Server-Sent Events decoder."""

from __future__ import annotations

import pytest

from transports.models.sse import SSEDecoder, SSEError


def test_events_split_across_feeds_are_assembled() -> None:
    decoder = SSEDecoder()

    assert decoder.feed(b'data: {"a"') == []
    assert decoder.feed(b": 1}\r\n\r\ndata: [DO") == ['{"a": 1}']
    assert decoder.feed(b"NE]\n\n") == ["[DONE]"]


def test_comments_and_other_fields_are_dropped_and_multiline_data_joined() -> None:
    decoder = SSEDecoder()

    events = decoder.feed(b": keep-alive\nevent: message\nid: 7\ndata: one\ndata:two\n\n")

    assert events == ["one\ntwo"]


def test_flush_returns_an_event_without_a_trailing_blank_line() -> None:
    decoder = SSEDecoder()

    assert decoder.feed(b"data: [DONE]") == []
    assert decoder.flush() == ["[DONE]"]
    assert decoder.flush() == []


def test_utf8_split_inside_a_character_is_decoded_whole() -> None:
    encoded = "data: caf\u00e9\n\n".encode()
    decoder = SSEDecoder()

    assert decoder.feed(encoded[:9]) + decoder.feed(encoded[9:]) == ["caf\u00e9"]


def test_overlong_line_and_invalid_utf8_are_errors() -> None:
    with pytest.raises(SSEError, match="longer than 16 bytes"):
        SSEDecoder(max_line_bytes=16).feed(b"data: " + b"x" * 32)
    with pytest.raises(SSEError, match="not UTF-8"):
        SSEDecoder().feed(b"data: \xff\xfe\n\n")
