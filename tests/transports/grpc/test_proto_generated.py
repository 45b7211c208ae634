"""The committed generated code is exactly what the .proto files produce (``make proto``)."""

from __future__ import annotations

from pathlib import Path

from proto.generate import OUTPUT, generate, sources


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_committed_code_matches_the_proto_files(tmp_path: Path) -> None:
    fresh = tmp_path / "_generated"
    generate(fresh)
    committed, generated = _tree(OUTPUT), _tree(fresh)
    assert sorted(committed) == sorted(generated), "files differ: run `make proto`"
    stale = [name for name in generated if committed[name] != generated[name]]
    assert not stale, f"stale generated code in {stale}: run `make proto`"


def test_every_proto_file_is_versioned_under_reel_v1() -> None:
    names = sources()
    assert names == [
        "reel/v1/approvals.proto",
        "reel/v1/gateway.proto",
        "reel/v1/journal.proto",
        "reel/v1/tape.proto",
    ]
    for name in names:
        text = (OUTPUT.parent / Path(name).name).read_text()
        assert "package reel.v1;" in text
        assert "reserved" in text, f"{name} reserves no field numbers for evolution"
