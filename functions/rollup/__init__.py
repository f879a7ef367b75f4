"""The rollup function: keeps per-interval figures of every entity, and their totals, equal to the raw readings."""
