"""The PostgreSQL journal (issue 24, step 1: one node): shard chains appended by a server-side
function, read by position or below the snapshot horizon. Imported only when ``[journal]
backend = "postgres"`` (psycopg is the ``reel[postgres]`` extra); docs/scale-out.md."""
