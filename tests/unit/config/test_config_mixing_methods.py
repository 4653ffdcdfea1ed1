"""``dynamic.method`` and its per-method sections (issue 33): what parses, each refusal in one line.

Every published method re-weights streams and reads its own section (``dynamic.doremi``, ...;
:mod:`curriculum_ds.config.mixers`); ``temperature``/``floor`` belong to ``softmax`` only.
"""

from __future__ import annotations

from typing import Any

import pytest
from config_sections import base_section, refused

from curriculum_ds.config import parse_curriculum
from curriculum_ds.config.mixers import METHODS, DoReMiConfig, SkillitConfig


def _dynamic(**keys: Any) -> dict[str, Any]:
    section = base_section()
    section["dynamic"] = {"enabled": True, **keys}
    return section


def _refused_dynamic(**keys: Any) -> str:
    return refused(lambda s: s.__setitem__("dynamic", {"enabled": True, **keys}))


def test_the_default_method_is_softmax_without_a_section():
    cfg = parse_curriculum(_dynamic())
    assert cfg.dynamic.method == "softmax"
    assert cfg.dynamic.method_config is None


@pytest.mark.parametrize("method", [m for m in METHODS if m not in ("softmax", "doremi", "file")])
def test_each_method_over_streams_parses_with_its_defaults(method):
    section = _dynamic(method=method, unit="streams")
    if method in ("aioli", "skillit"):  # they read held-out streams of the train streams' names
        section["eval"] = {"streams": [{"local": "data/short"}, {"local": "data/long"}]}
    cfg = parse_curriculum(section)
    model = METHODS[method]
    assert model is not None
    assert cfg.dynamic.method_config == model()


def test_doremi_scores_the_excess_loss_and_keeps_its_keys():
    cfg = parse_curriculum(
        _dynamic(
            method="doremi",
            unit="streams",
            reference_metric="ref_loss",
            doremi={"eta": 0.1, "apply": "loss"},
        )
    )
    assert cfg.dynamic.signal == "excess_loss"
    assert cfg.dynamic.method_config == DoReMiConfig(eta=0.1, epsilon=1e-4, apply="loss")


def test_a_skills_graph_is_kept_as_given():
    graph = [[1.0, 0.5], [0.0, 1.0]]
    section = _dynamic(method="skillit", unit="streams", skillit={"graph": graph})
    section["eval"] = {"streams": [{"local": "data/short"}, {"local": "data/long"}]}
    cfg = parse_curriculum(section)
    assert cfg.dynamic.method_config == SkillitConfig(graph=graph)


def test_the_file_method_reads_its_path():
    cfg = parse_curriculum(_dynamic(method="file", unit="streams", file={"path": "mix.json"}))
    assert cfg.dynamic.method_config is not None
    assert cfg.dynamic.method_config.path == "mix.json"  # type: ignore[union-attr]


def test_an_unknown_method_is_refused_with_a_did_you_mean():
    assert _refused_dynamic(method="doremmi", unit="streams") == (
        'curriculum.dynamic.method: unknown method "doremmi" (did you mean "doremi"?)'
    )


def test_a_method_without_the_stream_unit_is_refused():
    assert _refused_dynamic(method="odm") == (
        'curriculum.dynamic.unit: method "odm" re-weights streams: it needs unit "streams", not '
        '"buckets"'
    )


def test_doremi_without_its_reference_column_is_refused():
    assert _refused_dynamic(method="doremi", unit="streams") == (
        'curriculum.dynamic.reference_metric: signal "excess_loss" needs the metric column of '
        "the reference model's losses (`curriculum-ds score ... --column NAME`)"
    )


def test_another_methods_section_is_refused():
    assert _refused_dynamic(method="odm", unit="streams", ado={"refit_every": 5}) == (
        'curriculum.dynamic.ado: the keys of method "ado", but method is "odm"; remove them'
    )


def test_softmax_keys_on_another_method_are_refused():
    assert _refused_dynamic(method="ado", unit="streams", temperature=0.5) == (
        'curriculum.dynamic.temperature: applies only to method "softmax", not "ado"; remove it'
    )
    assert _refused_dynamic(method="odm", unit="streams", signal="learnability") == (
        'curriculum.dynamic.signal: applies only to methods "softmax" and "doremi", not "odm"; '
        "remove it"
    )


def test_the_file_method_without_a_path_is_refused():
    assert _refused_dynamic(method="file", unit="streams") == (
        'curriculum.dynamic.file: method "file" needs the weights file: "file": {"path": '
        '"mix.json"}'
    )


@pytest.mark.parametrize(
    ("method", "section", "field"),
    [
        ("doremi", {"eta": 0}, "eta"),
        ("aioli", {"eta": -1.0}, "eta"),
        ("odm", {"alpha": 1.0}, "alpha"),
    ],
)
def test_out_of_range_method_keys_are_refused_naming_the_key(method, section, field):
    extra = {"reference_metric": "ref_loss"} if method == "doremi" else {}
    line = _refused_dynamic(method=method, unit="streams", **{method: section}, **extra)
    assert line.startswith(f"curriculum.dynamic.{method}.{field}: "), line
