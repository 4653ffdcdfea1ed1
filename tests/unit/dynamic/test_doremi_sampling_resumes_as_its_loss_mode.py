"""DoReMi's ``apply: "sampling"`` resumes exactly, through loss mode's state and the loader's own.

The 2-rank test (``tests/integration/test_mixing_methods_on_two_ranks.py``) kills and resumes
DoReMi in ``apply: "loss"`` mode only; each kill is a launch of its own (~20 s of a suite over
its budget). This shows in-process, over a real loader, that ``"sampling"`` needs nothing that
run does not already cover:

* its saved state is loss mode's model, key for key (only ``method_keys.apply`` differs), and
  its ``start_phase`` restores the same fields from it;
* the one difference on a resume is what comes back from outside the method: loss mode hands
  the loader its loss weights again, sampling mode hands nothing and the loader restores the
  proportions it applied from its own state (the path the ``softmax``, ODM and ADO kills
  take on two ranks);
* a run rebuilt from both saved forms mid-phase (between recomputes and on one) draws the
  uninterrupted run's batches and writes its history, in either mode.

From issue 33 (item 1; acceptance "2 ranks ... kill -9 mid-phase").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from doremi_configs import doremi_dynamic
from loader_runs import NOISE, mix_phase, reference_streams, resumed, started

from curriculum_ds.dynamic import (
    DoReMiReweighter,
    MixtureUpdate,
)
from curriculum_ds.dynamic.state import DoReMiState


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return reference_streams(tmp_path_factory.mktemp("streams"))


def _losses(batch: np.ndarray, step: int) -> np.ndarray:
    """Text losses fall with the step, each sample its own; noise stays at 4.5 nats."""
    text = 3.0 / (1.0 + 0.1 * step) + 1.0 + 0.01 * (batch[:, 1] % 7)
    return np.where(batch[:, 0] == NOISE, 4.5, text)


def _run(
    streams: list[Path], apply: str, *, steps: int, resume_at: int | None = None
) -> tuple[list[list[list[int]]], list[list[float]], list[dict[str, Any]], DoReMiReweighter]:
    """Batches, the loader's loss weights at each step, history rows and the method at the end."""
    cfg = doremi_dynamic(window=30, eta=0.5, apply=apply, recompute_every_n_steps=3)
    phase = mix_phase(streams)
    loader, method = started(phase, cfg)
    assert isinstance(method, DoReMiReweighter)
    batches, loss_weights, records = [], [], []
    for step in range(1, steps + 1):
        if step == resume_at:  # a new process: both rebuilt from their saved forms
            loader, method, back = resumed(phase, cfg, loader, method)
            if apply == "sampling":  # nothing from the method: the loader restores its own
                assert back == MixtureUpdate()
            else:
                assert back.proportions is None
                assert back.loss_weights is not None
        batch = loader.next_global_batch(10)
        batches.append(batch.tolist())
        loss_weights.append(loader.loss_weights.tolist())
        method.observe(batch, _losses(batch, step))
        update = method.maybe_recompute(step)
        if update is not None:
            loader.apply(update)
            records.append(update.record)
    loader.close()
    return batches, loss_weights, records, method


@pytest.mark.parametrize("resume_at", [8, 10])  # between recomputes; just after one (step 9)
@pytest.mark.parametrize("apply", ["sampling", "loss"])
def test_a_resume_mid_phase_draws_and_writes_what_the_uninterrupted_run_does(
    streams, apply, resume_at
):
    a_batches, a_weights, a_records, a = _run(streams, apply, steps=21)
    b_batches, b_weights, b_records, b = _run(streams, apply, steps=21, resume_at=resume_at)
    assert b_batches == a_batches
    assert b_weights == a_weights
    assert b_records == a_records
    assert json.dumps(b.state().to_dict(), default=np.ndarray.tolist) == json.dumps(
        a.state().to_dict(), default=np.ndarray.tolist
    )
    assert len(a_records) == 7
    if apply == "sampling":  # the weights drove the sampler: the noise stream drawn less
        assert a_records[-1]["weights"][NOISE] < 0.2
        assert all(w == [1.0, 1.0, 1.0] for w in a_weights)
        shares = np.bincount([s for b in a_batches[-6:] for s, _ in b], minlength=3) / 60
        assert shares[NOISE] < 0.2
    else:  # the mix stayed; the loss weights moved
        assert a_weights[-1][NOISE] < a_weights[0][NOISE]


def test_sampling_saves_loss_modes_state_key_for_key(streams):
    _, _, _, sampling = _run(streams, "sampling", steps=10)
    _, _, _, loss = _run(streams, "loss", steps=10)
    s, ell = sampling.state(), loss.state()
    assert type(s) is type(ell) is DoReMiState
    assert list(s.to_dict()) == list(ell.to_dict())
    assert list(s.doremi.to_dict()) == list(ell.doremi.to_dict())
    assert list(s.window.to_dict()) == list(ell.window.to_dict())
    assert s.method_keys is not None
    assert ell.method_keys is not None
    assert {k: v for k, v in s.method_keys.items() if k != "apply"} == {
        k: v for k, v in ell.method_keys.items() if k != "apply"
    }
    assert (s.method_keys["apply"], ell.method_keys["apply"]) == ("sampling", "loss")
