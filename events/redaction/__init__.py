"""Secrets out of every event: detectors, vendored rules, streaming."""
