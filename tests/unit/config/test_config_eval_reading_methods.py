"""``dynamic.aioli`` and ``dynamic.skillit``: what parses, and each refusal in one line.

Both read held-out losses of the phase's streams by name (``eval_streams``, else
``curriculum.eval``); Skill-it's graph is K×K with entries ≥ 0; an Aioli probe round fits in a
round of ``recompute_every_n_steps``.

From issue 33 (items 4 and 5, acceptance "bad input").
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from config_sections import base_section

from curriculum_ds.config import parse_curriculum
from curriculum_ds.config.mixers import AioliConfig, SkillitConfig
from curriculum_ds.errors import ConfigError
from curriculum_ds.plugin.evaluation import probe_eval_config

HELD_OUT = {"streams": [{"local": "held/short", "name": "short"}, {"local": "held/long"}]}


def _section(method: str, keys: dict[str, Any] | None = None, **dynamic: Any) -> dict[str, Any]:
    section = copy.deepcopy(base_section())
    section["dynamic"] = {"enabled": True, "method": method, "unit": "streams", **dynamic}
    if keys is not None:
        section["dynamic"][method] = keys
    section["eval"] = copy.deepcopy(HELD_OUT)
    return section


def _refused(section: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_curriculum(section)
    message = str(info.value)
    assert "\n" not in message
    assert "Traceback" not in message
    return message


def test_the_held_out_streams_default_to_curriculum_evals_of_the_train_names():
    section = _section("aioli")
    section["eval"]["streams"].append({"local": "held/other"})  # not a train stream: not read
    cfg = parse_curriculum(section)
    assert cfg.dynamic.method_config == AioliConfig()
    probe = probe_eval_config(cfg)
    assert probe is not None
    assert [s.name for s in probe.streams] == ["short", "long"]
    assert probe.max_samples == 512


def test_a_separate_held_out_set_is_read_instead():
    streams = [{"local": "sep/short"}, {"local": "sep/long"}]
    section = _section("skillit", {"eval_streams": streams, "eval_max_samples": 32})
    del section["eval"]
    cfg = parse_curriculum(section)
    probe = probe_eval_config(cfg)
    assert probe is not None
    assert [s.local for s in probe.streams] == ["sep/short", "sep/long"]
    assert probe.max_samples == 32
    assert isinstance(cfg.dynamic.method_config, SkillitConfig)


def test_a_train_stream_without_a_held_out_stream_of_its_name_is_refused():
    section = _section("skillit")
    section["eval"]["streams"] = [{"local": "held/short"}]
    assert _refused(section) == (
        'curriculum.dynamic.skillit: train stream "long" of schedule[1] ("mix") '
        "has no held-out stream of its name in curriculum.eval.streams (short)"
    )
    section = _section("aioli", {"eval_streams": [{"local": "x/long"}]})
    assert _refused(section) == (
        'curriculum.dynamic.aioli.eval_streams: train stream "short" of schedule[1] ("mix") '
        "has no held-out stream of its name in dynamic.aioli.eval_streams (long)"
    )


def test_no_held_out_streams_at_all_is_refused():
    section = _section("aioli")
    del section["eval"]
    assert _refused(section) == (
        'curriculum.dynamic.aioli: method "aioli" reads held-out losses: give it '
        '"eval_streams" (or a curriculum.eval section with a stream of each train stream\'s '
        "name)"
    )


@pytest.mark.parametrize(
    ("graph", "message"),
    [
        ([[1, 0], [0]], "row 1 has 1 entries: the graph must be 2×2 (one row and one column "
                        "per stream)"),
        ([[1, -0.5], [0, 1]], "entry [0][1] is -0.5: entries must be ≥ 0"),
        ([[1, 0, 0], [0, 1, 0], [0, 0, 1]], 'a 3×3 graph, but schedule[1] ("mix") has 2 '
                                            "streams: it must be 2×2"),
    ],
)  # fmt: skip
def test_a_skills_graph_of_the_wrong_shape_or_sign_is_refused(graph, message):
    assert _refused(_section("skillit", {"graph": graph})) == (
        f"curriculum.dynamic.skillit.graph: {message}"
    )


@pytest.mark.parametrize("method", ["aioli", "skillit"])
@pytest.mark.parametrize("eta", [0, -0.1])
def test_eta_not_above_zero_is_refused(method, eta):
    line = _refused(_section(method, {"eta": eta}))
    assert line.startswith(f"curriculum.dynamic.{method}.eta: "), line
    assert line.endswith(f"must be > 0, got {eta}"), line


def test_an_aioli_probe_round_that_does_not_fit_is_refused():
    section = _section("aioli", {"lp_rounds": 2, "probe_steps": 3}, recompute_every_n_steps=12)
    assert _refused(section) == (
        'curriculum.dynamic.aioli.probe_steps: a probe round of schedule[1] ("mix") takes 2 '
        "streams × lp_rounds 2 × probe_steps 3 = 12 steps, which does not fit in a round of "
        "recompute_every_n_steps 12 (the learned mixture needs at least one step)"
    )
    parse_curriculum(
        _section("aioli", {"lp_rounds": 2, "probe_steps": 3}, recompute_every_n_steps=13)
    )
