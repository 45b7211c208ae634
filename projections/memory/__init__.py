"""The memory view: rows, hybrid search, BM25, embedders, stats."""
