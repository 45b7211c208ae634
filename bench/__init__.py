"""The benchmarks, each a script run as ``.venv/bin/python bench/<name>.py``.

A package so that mypy checks them as ``bench.journal``, ``bench.runs``, ... Run as a script, a
benchmark's folder comes first on ``sys.path``, so no file here may share a name with a module
it imports (``http``, ``grpc``, reel's ``tools``): ``bench/http_reads.py``, ``bench/grpc_stream.py``
and ``bench/tool_calls.py`` are named so. ``tests/test_one_home.py`` holds that rule.
"""
