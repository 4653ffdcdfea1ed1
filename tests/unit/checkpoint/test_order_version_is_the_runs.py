"""``curriculum.order_version`` is per run: 2 for a fresh run, the checkpoint's on a resume.

A checkpoint without the key (every one written before it) is version 1; only an explicit value
that conflicts with the checkpoint is refused, in one line; the bucket unit draws in version 1.
"""

from __future__ import annotations

from typing import Any

import pytest

from curriculum_ds.checkpoint.rules import check_resume, fresh_plan
from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.config import parse_curriculum
from curriculum_ds.errors import ConfigError, ResumeError

BUCKETS = {"enabled": True, "num_buckets": 4, "window": 100, "floor": 0.05}


def _cfg(order_version: int | None = None, **dynamic: Any):
    extra = {} if order_version is None else {"order_version": order_version}
    return parse_curriculum(
        {
            "max_duration": "2000tok",
            "schedule": [
                {
                    "name": name,
                    "duration": "1000tok",
                    "train_loader": {"streams": [{"local": "data/x"}]},
                }
                for name in ("a", "b")
            ],
            "dynamic": dynamic,
            **extra,
        }
    )


def _saved(version: int | None, progress: int = 500) -> dict[str, Any]:
    saved = CurriculumState.at(
        _cfg(), progress, global_step=5, consumed_tokens=progress, consumed_samples=20
    ).to_dict()
    saved.pop("order_version")
    return saved if version is None else {**saved, "order_version": version}


def test_a_fresh_run_draws_in_version_2_but_the_bucket_unit_in_1() -> None:
    assert _cfg().fresh_order_version == 2
    assert _cfg(1).fresh_order_version == 1
    assert _cfg(**BUCKETS).fresh_order_version == 1
    assert fresh_plan(_cfg()).order_version == 2
    with pytest.raises(ConfigError, match="order_version") as refused:
        _cfg(2, **BUCKETS)
    assert "\n" not in str(refused.value).strip()


def test_the_checkpoint_records_its_version_last() -> None:
    saved = CurriculumState.at(
        _cfg(), 500, global_step=5, consumed_tokens=500, consumed_samples=20
    ).to_dict()
    assert list(saved)[-2:] == ["version", "order_version"]
    assert saved["order_version"] == 2
    assert CurriculumState.from_dict(_saved(None)).drawn_order == 1  # a checkpoint of before


@pytest.mark.parametrize(
    ("config", "saved", "continues_in"),
    [(None, None, 1), (1, None, 1), (None, 1, 1), (None, 2, 2), (2, 2, 2), (1, 1, 1)],
)
def test_a_resume_continues_in_the_checkpoints_version(
    config: int | None, saved: int | None, continues_in: int
) -> None:
    assert check_resume(_cfg(config), _saved(saved)).order_version == continues_in


@pytest.mark.parametrize(("config", "saved", "drawn"), [(2, None, 1), (2, 1, 1), (1, 2, 2)])
def test_an_explicit_conflicting_version_is_refused_in_one_line(
    config: int, saved: int | None, drawn: int
) -> None:
    with pytest.raises(ResumeError) as refused:
        check_resume(_cfg(config), _saved(saved))
    assert str(refused.value) == (
        f"curriculum.order_version: {config} (config) but the checkpoint's run draws in order "
        f"version {drawn}; remove the key to continue in it"
    )


def test_the_bucket_unit_cannot_continue_a_version_2_run() -> None:
    # on the phase boundary, where dynamic re-weighting may be turned on
    with pytest.raises(ResumeError, match=r'^curriculum\.dynamic\.unit: "buckets" cannot'):
        check_resume(_cfg(**BUCKETS), _saved(2, 1000))
    assert check_resume(_cfg(**BUCKETS), _saved(None, 1000)).order_version == 1
