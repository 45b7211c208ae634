"""Tests of actors/runs/."""
