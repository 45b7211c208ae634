"""Tests of actors/tasks/."""
