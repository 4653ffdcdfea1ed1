"""One launched job for the launched runs of every selected test module (the easy path).

A module declares its runs in a generator decorated with :func:`shared_runs`: each ``yield`` is a
*round*, a list of :class:`Run`, and receives the outputs of that round's runs (``{run_dir:
RunOutput}``); what it returns is what its module fixture gets from the session's
``shared_job`` fixture (``tests/conftest.py``). Round 1 of every selected module runs in one
launched job per world size (:func:`helpers.launch_many`), then round 2 of every module, and so
on: an uninterrupted run, a run killed by ``--kill-after-step`` and its resume in round 2 cost
two launches for all the modules together, not two per module. A killed run ends its job (the
SIGKILL ends every rank), so each kill after the first of a round ends a job of its own. The
launcher and the torch/DeepSpeed imports (~10 s per launch on 2 CPU ranks) are paid once per
job::

    @shared_runs
    def _runs(root: Path) -> Generator[list[Run], Outputs, dict[str, Any]]:
        cfg = write_ds_config(root / "ds.json", curriculum)
        a, b = root / "A", root / "B"
        yield [Run(cfg, a), Run(cfg, b, ("--kill-after-step", "4"))]
        killed_at = [r["step"] for r in metrics(b)]  # between the rounds: the kill's records
        yield [Run(cfg, b, ("--resume", "auto"))]
        return {"A": a, "B": b, "killed_at": killed_at}


    @pytest.fixture(scope="module")
    def runs(shared_job):
        return shared_job(_runs)

A run that fails (not marked ``may_fail``, not a kill) and an exception of the generator fail
the fixture of its own module only, with the run's output; the other modules' runs go on. With
``pytest path/to/test_x.py`` only that module's runs are launched.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from helpers import RunOutput, launch_many

__all__ = ["Outputs", "Run", "SharedJob", "builders_of", "shared_runs"]

Outputs = dict[Path, RunOutput]
"""A round's outputs, by run dir."""
Builder = Callable[[Path], Generator[list["Run"], Outputs, Any]]

_KILLS = ("--kill-after-step", "--kill-during-save", "--kill-during-prune")
_BUILDERS: dict[str, list[Builder]] = {}
"""The decorated generators, by the name of their module."""


class Run(NamedTuple):
    """One run of the reference loop (``curriculum_ds.train``, or ``faulty_train``'s faults that
    ``many_runs`` takes: ``--kill-after-step``, ``--kill-during-save``, ``--kill-during-prune``,
    ``--dump-state``, ``--nan-loss``), as :func:`helpers.launch` would run it."""

    ds_config: Path
    run_dir: Path
    args: tuple[str, ...] = ()
    may_fail: bool = False
    """It may exit non-zero (its test asserts the exit code); a kill always may."""
    num_gpus: int = 2

    @property
    def kill(self) -> bool:
        return any(a.split("=")[0] in _KILLS for a in self.args)


def builders_of(module: str) -> list[Builder]:
    """The ``@shared_runs`` generators of a module (by its name)."""
    return _BUILDERS.get(module, [])


def shared_runs(builder: Builder) -> Builder:
    """Register ``builder(root)``, a generator of rounds of runs, with the session's shared job."""
    assert inspect.isgeneratorfunction(builder), f"{builder.__qualname__}: yield its runs"
    _BUILDERS.setdefault(builder.__module__, []).append(builder)
    return builder


@dataclass
class _Pending:
    generator: Generator[list[Run], Outputs, Any]
    runs: list[Run]


class SharedJob:
    """The session's shared launched job: call it with a module's builder for its result."""

    def __init__(self, session: pytest.Session, tmp: pytest.TempPathFactory) -> None:
        self._session = session
        self._tmp = tmp
        self._results: dict[Builder, tuple[bool, Any]] | None = None
        self._failure: str | None = None

    def __call__(self, builder: Builder) -> Any:
        if self._results is None:
            self._results = {}
            try:
                self._run_all()
            except BaseException as err:  # a timeout, an interrupt: no module gets a result
                self._failure = f"the shared job stopped: {type(err).__name__}: {err}"
                raise
        assert self._failure is None, self._failure
        assert builder in self._results, f"{builder.__qualname__}: not a @shared_runs generator"
        ok, value = self._results[builder]
        if not ok:
            raise value
        return value

    def _selected(self) -> list[Builder]:
        """The builders of the selected tests' modules, in the order the modules run."""
        names = dict.fromkeys(
            item.module.__name__ for item in self._session.items if hasattr(item, "module")
        )
        return [b for name in names for b in builders_of(name)]

    def _run_all(self) -> None:
        assert self._results is not None
        pending: dict[Builder, _Pending] = {}
        for builder in self._selected():
            root = self._tmp.mktemp(builder.__module__.rsplit(".", 1)[-1])
            generator = builder(root)
            self._advance(builder, generator, None, pending)
        while pending:
            outputs = _launch_round([run for p in pending.values() for run in p.runs])
            current, pending = pending, {}
            for builder, p in current.items():
                failed = [r for r in p.runs if outputs[r.run_dir].returncode and not _may_fail(r)]
                if failed:
                    p.generator.close()
                    self._results[builder] = (False, _run_failed(failed[0], outputs))
                    continue
                mine = {r.run_dir: outputs[r.run_dir] for r in p.runs}
                self._advance(builder, p.generator, mine, pending)

    def _advance(
        self,
        builder: Builder,
        generator: Generator[list[Run], Outputs, Any],
        sent: Outputs | None,
        pending: dict[Builder, _Pending],
    ) -> None:
        """Run the generator to its next round (pending) or its end (a result or its error)."""
        assert self._results is not None
        try:
            runs = next(generator) if sent is None else generator.send(sent)
        except StopIteration as stop:
            self._results[builder] = (True, stop.value)
        except Exception as err:  # the module's own assertion between rounds: its fixture's
            self._results[builder] = (False, err)
        else:
            pending[builder] = _Pending(generator, list(runs))


def _may_fail(run: Run) -> bool:
    return run.may_fail or run.kill


def _run_failed(run: Run, outputs: Outputs) -> AssertionError:
    out = outputs[run.run_dir]
    return AssertionError(
        f"run {run.run_dir} of the shared job failed ({out.returncode}): {' '.join(run.args)}\n"
        f"{out.output[-6000:] or '(no output: the job ended before it, see the run before)'}"
    )


def _launch_round(runs: list[Run]) -> Outputs:
    """A round's runs in as few launched jobs as the kills allow: per world size, the runs that
    end normally, then the kills, each of which ends a job."""
    outputs: Outputs = {}
    for num_gpus in sorted({r.num_gpus for r in runs}):
        same = [r for r in runs if r.num_gpus == num_gpus]
        rest = [r for r in same if not r.kill]
        jobs: list[list[Run]] = []
        for kill in (r for r in same if r.kill):
            jobs.append([*rest, kill])
            rest = []
        if rest:
            jobs.append(rest)
        for job in jobs:
            outputs |= launch_many(
                [(r.ds_config, r.run_dir, r.args) for r in job],
                num_gpus=num_gpus,
                may_fail=frozenset(r.run_dir for r in job),
                timeout=600 + 180 * len(job),
            )
    return outputs
