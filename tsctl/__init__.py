"""tsctl: the command line of the write-sharded time-series store."""
