"""MemoryPipelineConfig: the issue's defaults and ranges, one clear error per bad value."""

from __future__ import annotations

from typing import Any

import pytest

from groundwire import ConfigError, MemoryPipelineConfig


def test_the_defaults() -> None:
    config = MemoryPipelineConfig()
    assert (config.poll_interval_s, config.hints, config.hints_max, config.hints_timeout_s) == (
        5.0, False, 5, 45.0)  # fmt: skip
    assert (config.semantic_contradiction, config.contradiction_timeout_s) == (True, 120.0)
    assert config.update_policy == "block"
    assert config.lease_s > max(config.extraction_timeout_s, config.scoring_timeout_s)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("poll_interval_s", 0.5, "from 1 to 60"),
        ("poll_interval_s", 61, "from 1 to 60"),
        ("hints_max", 0, "an integer >= 1 <= 20"),
        ("hints_max", 21, "an integer >= 1 <= 20"),
        ("hints_timeout_s", 4.9, "from 5 to 300"),
        ("contradiction_timeout_s", 301, "from 5 to 300"),
        ("scoring_timeout_s", float("nan"), "from 5 to 300"),
        ("summary_timeout_s", 0.5, "from 1 to 60"),
        ("lease_s", 100.0, "more seconds than the longest call timeout (120 s)"),
        ("update_policy", "always", "one of block, shadow, apply"),
        ("max_calls_per_memory", 0, "an integer >= 1"),
        ("max_calls_per_minute", True, "an integer >= 1"),
        ("aspect_max_weight", 0.05, "a finite number >= 0.1"),
        ("backoff_max_s", 1.0, "a finite number >= 10"),
        ("contradiction_min_confidence", 1.5, "between 0 and 1"),
        ("hints", "yes", "a bool"),
        ("model", " ", "a model name or None"),
    ],
)
def test_a_bad_value_names_the_option_and_the_range(option: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{option}=") as caught:
        MemoryPipelineConfig(**{option: value})
    assert message in str(caught.value)
