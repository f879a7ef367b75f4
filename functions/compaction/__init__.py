"""The compaction function: each settled hour of the write tier, compacted into per-entity blocks."""
