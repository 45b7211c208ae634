"""The ``reel`` protobuf package tree: ``reel.v1`` lives in :mod:`proto.reel.v1`."""
