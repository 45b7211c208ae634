"""How ``reel chat`` shows what a run's context held besides the message."""

from __future__ import annotations

from transports.cli.render import context_line


def test_the_context_line_names_summary_memory_references_and_learnings() -> None:
    line = context_line(
        {
            "compaction_id": "01KCOMPACTION0000000000000",
            "memory": [{"item_id": "01KMEMORY000000000000000000", "final": 6700}],
            "references": [
                {"kind": "file", "target": "a.txt", "outcome": "denied", "note": "policy"}
            ],
            "learned": [{"kind": "preference", "text": "Always answer in French"}],
            "estimated_input_tokens": 137,
        }
    )
    assert line == (
        "   context: summary 01KCOMPACTION0000000000000; memory 01KMEMORY000000000000000000"
        " (0.67); @file:a.txt denied: policy; learned preference 'Always answer in French'"
        " (~137 tokens)"
    )
    assert context_line({"estimated_input_tokens": 12}) is None
