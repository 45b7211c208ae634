"""The benchmarks, each a script run as ``.venv/bin/python bench/<name>.py``.

A package only so that mypy checks them as ``bench.http``, ``bench.tools``, ...: as top-level
modules their names would shadow the standard library's ``http`` and reel's ``tools``.
"""
