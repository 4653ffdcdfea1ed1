"""The SIGTERM flag (issue 13 item 2) and the non-finite limit (item 3) in one process.

SIGTERM sent to this process is recorded, not fatal, as often as it comes, and ``restore`` puts
the previous handler back; from a thread other than the main one nothing is installed. The
limit check names the steps and the setting in one line.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from curriculum_ds.errors import NonFiniteLossError
from curriculum_ds.plugin.nonfinite import check_nonfinite_limit
from curriculum_ds.plugin.preemption import StopSignal


def test_sigterm_is_recorded_then_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    stop = StopSignal()
    try:
        assert stop.installed
        assert stop.received is None
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # a second one (a launcher forwarding it) too
        assert stop.received == signal.SIGTERM
        assert stop.count == 2
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGTERM) == before
    assert not stop.installed
    stop.restore()  # twice is fine


def test_nothing_is_installed_off_the_main_thread() -> None:
    made: list[StopSignal] = []
    thread = threading.Thread(target=lambda: made.append(StopSignal()))
    thread.start()
    thread.join()
    assert not made[0].installed
    assert made[0].received is None


def test_the_limit_names_the_steps_and_the_setting() -> None:
    check_nonfinite_limit(2, 3, global_step=9)  # below the limit: nothing
    with pytest.raises(NonFiniteLossError) as info:
        check_nonfinite_limit(3, 3, global_step=9)
    assert str(info.value) == (
        "steps 7-9: 3 optimizer steps in a row had a NaN/inf loss or gradient norm "
        "(curriculum.max_consecutive_nonfinite = 3); none updated the model, the run stops and "
        "the last checkpoint written stays `latest`"
    )
