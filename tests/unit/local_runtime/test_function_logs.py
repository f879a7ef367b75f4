"""The functions' stdout goes to the function log while the system runs; the console stays the command's."""

from __future__ import annotations

import io
import logging
import sys

from local_runtime.function_logs import FunctionLogRouter


def test_stdout_and_handlers_bound_to_it_go_to_the_sink_until_uninstalled() -> None:
    sink = io.StringIO()
    logger = logging.getLogger("local_runtime.test.bound")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    before = sys.stdout
    handler = logging.StreamHandler(sys.stdout)
    logger.addHandler(handler)
    router = FunctionLogRouter(sink)
    try:
        router.install()
        print("from a handler")
        logger.info("log line")
        router.console.write("")  # the console is the stdout from before
        assert router.console is before
        late = logging.StreamHandler(sys.stdout)  # bound while routing, as Powertools binds at import
    finally:
        router.uninstall()
        logger.removeHandler(handler)
    assert sink.getvalue() == "from a handler\nlog line\n"
    assert sys.stdout is before
    assert handler.stream is before
    # A handler bound while routing passes through to stdout afterwards, without error
    late.stream.write("")
    late.flush()


def test_without_a_sink_function_output_is_dropped() -> None:
    router = FunctionLogRouter(None)
    before = sys.stdout
    router.install()
    try:
        print("dropped")
    finally:
        router.uninstall()
    assert sys.stdout is before
