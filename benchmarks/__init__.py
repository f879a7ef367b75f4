"""Benchmarks: ``python -m benchmarks [NAME ...] [--quick]``.

A plain harness, not timed tests: each benchmark is a function registered with
:func:`benchmarks.harness.benchmark` that returns its figures; the harness runs
the selected ones, prints a table and writes ``out/bench/results.json`` with the
machine it ran on. To add one, write a module here with a registered function
and import it in :mod:`benchmarks.registry`.
"""
