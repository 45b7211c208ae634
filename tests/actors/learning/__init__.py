"""Tests of actors/learning/."""
