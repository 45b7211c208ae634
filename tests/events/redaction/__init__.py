"""Tests of events/redaction/."""
