"""Every benchmark module, imported so that its functions register themselves."""

from benchmarks import ingest

__all__ = ["ingest"]
