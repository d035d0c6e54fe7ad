"""The seed-shaped fixture with its fallbacks fixed (tests only)."""
