"""reel's projections package."""
