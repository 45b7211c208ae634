"""Tests of actors/approvals/."""
