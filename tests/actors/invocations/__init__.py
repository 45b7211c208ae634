"""Tests of actors/invocations/."""
