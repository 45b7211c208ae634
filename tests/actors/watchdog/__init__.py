"""Tests of actors/watchdog/."""
