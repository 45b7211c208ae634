"""Tests of actors/sessions/."""
