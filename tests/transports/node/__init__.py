"""Tests of transports/node/."""
