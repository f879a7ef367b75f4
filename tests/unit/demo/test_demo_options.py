"""The demo's options: the compressed-time settings are valid together, and bad options are refused."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from demo.options import DEMO_CONTEXT, DEMO_HOT_KEYS_ENVIRONMENT, DemoOptions
from hotkeys.settings import HotKeySettings
from infra.config import Context, FunctionWiring, LambdaFunction
from tsctl.commands.demo import options_from, register

TOPIC = "arn:aws:sns:eu-west-1:123456789012:t"


def test_the_compressed_time_settings_are_a_valid_stack_and_hot_key_configuration() -> None:
    # Given the demo's context overrides and the hot-key function's variables
    config = Context.parse(dict(DEMO_CONTEXT))
    env = {
        **config.function_environment(LambdaFunction.HOTKEYS, FunctionWiring(alert_topic_arn=TOPIC)),
        **DEMO_HOT_KEYS_ENVIRONMENT,
    }
    # When the hot-key function parses them as it does at cold start
    settings = HotKeySettings.from_env(env)
    # Then the windows divide the bucket, and a change lands within 75 s of being decided:
    # the cache TTL plus the margin is 15 s, rounded up to the next 1-minute boundary
    assert settings.detector.window_ms == 5_000 and settings.window_grace_ms == 5_000
    # And the lowered threshold is the detector's, with enough counters a batch that a key over it is kept
    assert settings.split_threshold_wcu == DEMO_CONTEXT["hot_split_threshold_wcu"] < 500
    assert settings.detector.counters_per_window >= 1_000 / settings.split_threshold_wcu
    assert settings.change_margin_ms == 10_000
    assert settings.shard_map_cache_ttl_ms + settings.change_margin_ms == 15_000
    assert settings.layout.bucket.width_ms == 60_000


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["demo", *argv])


def test_quick_is_the_smaller_scenario_and_options_override_it() -> None:
    options = options_from(parse("--quick", "--sensors", "50", "--out", "x", "--faults", "invoke_errors=0.1"))
    assert options.sensors == 50 and options.hot_rate == DemoOptions.quick().hot_rate
    assert options.out_dir == Path("x") and options.faults.invocation_error_fraction == 0.1
    assert options_from(parse()).sensors == DemoOptions().sensors


@pytest.mark.parametrize(
    ("argv", "field"),
    [(["--faults", "throttle"], "--faults"), (["--sensors", "0"], "--sensors"), (["--hot-rate", "0"], "--hot-rate")],
)
def test_bad_options_are_refused_naming_them(argv: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(*argv)
    assert f"argument {field}" in capsys.readouterr().err
