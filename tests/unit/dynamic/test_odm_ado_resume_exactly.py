"""ODM and ADO resume exactly: a state saved mid-phase, read back, continues the same updates."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from ado_cases import dynamic, phase, synthetic_steps

from curriculum_ds.dynamic import make_reweighter, parse_dynamic_state
from curriculum_ds.dynamic.state import StreamADOState, StreamODMState

CONFIGS = {
    "odm": dynamic("odm", alpha=0.9, warmup_steps=3),
    "ado": dynamic(
        "ado",
        recompute=2,
        skip_steps=2,
        warmup_steps=20,
        refit_every=20,
        savgol_window=11,
        fit_starts=1,
    ),
}
STATES = {"odm": StreamODMState, "ado": StreamADOState}
PROPORTIONS = [0.2, 0.5, 0.3]


def _run(method: str, steps: list[Any], saved: Any = None, first: int = 1) -> tuple[Any, list]:
    rw = make_reweighter(CONFIGS[method])
    rw.start_phase(phase(PROPORTIONS), saved)
    out = []
    for i, (b, losses) in enumerate(steps, start=first):
        rw.observe(b, losses)
        update = rw.maybe_recompute(i)
        out.append(
            None if update is None else (update.proportions.tolist(), update.record)  # type: ignore[union-attr]
        )
    return rw, out


@pytest.mark.parametrize("method", ["odm", "ado"])
def test_a_resume_mid_phase_continues_bit_identically(method: str) -> None:
    steps = synthetic_steps(3, 80, seed=7)
    _, whole = _run(method, steps)
    assert sum(u is not None for u in whole) >= 20
    first, head = _run(method, steps[:45])
    assert head == whole[:45]
    state = first.state()
    assert isinstance(state, STATES[method])
    saved = parse_dynamic_state(pickle.loads(pickle.dumps(state.to_dict())))
    assert type(saved) is STATES[method]
    _, tail = _run(method, steps[45:], saved, first=46)
    assert tail == whole[45:]


@pytest.mark.parametrize("method", ["odm", "ado"])
def test_a_state_before_any_phase_reads_back(method: str) -> None:
    state = make_reweighter(CONFIGS[method]).state()
    assert parse_dynamic_state(state.to_dict()).phase_idx is None


@pytest.mark.parametrize("method", ["odm", "ado"])
def test_a_state_of_an_earlier_phase_keeps_only_the_recompute_count(method: str) -> None:
    first, _ = _run(method, synthetic_steps(3, 40, seed=3))
    rw = make_reweighter(CONFIGS[method])
    rw.start_phase(phase([0.5, 0.5], phase_idx=1), first.state())
    assert rw.num_recomputes == first.num_recomputes > 0
    assert rw.state().probs.tolist() == [0.5, 0.5]


def test_history_rows_carry_the_methods_own_quantities() -> None:
    _, odm = _run("odm", synthetic_steps(3, 10, seed=1))
    assert odm[:3] == [None, None, None]  # warmup_steps 3
    record = odm[3][1]
    assert record["method"] == "odm"
    assert record["t"] == 4
    assert record["epsilon_t"] == pytest.approx(min(1 / 3, np.sqrt(np.log(3) / 12)))
    _, ado = _run("ado", synthetic_steps(3, 30, seed=1))
    rows = [u[1] for u in ado if u is not None]
    assert rows[0]["t"] == 21
    assert rows[0]["refitted"] is False
    assert len(rows[0]["fit"]) == 3
    assert all(0 <= f["alpha"] <= 0.8 + 1e-6 for f in rows[0]["fit"])
