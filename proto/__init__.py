"""reel's proto package."""
