"""A session: its stream ``session/<id>``, the runs it queues, compaction."""
