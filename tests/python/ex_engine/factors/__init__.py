"""Stand-in for the seed engine's package layout (tests only)."""
