"""Who is calling and whether they may: tokens, authority, grants."""
