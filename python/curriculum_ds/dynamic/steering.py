"""Steering the mix by hand: ``dynamic.method: "file"`` over ``unit: "streams"``.

An operator edits a JSON file during the run; its weights replace the phase's stream
proportions from the step after the next recompute boundary (every
``recompute_every_n_steps``), auditable and replayable:

* **The file** (``dynamic.file.path``, relative to rank 0's working directory) holds one JSON
  object, stream name → weight, with a weight for every stream of the phase and no other name:
  ``{"code": 3, "web": 1}``; every weight a finite number > 0. The weights are normalised over
  the phase's streams (:func:`read_weights`).
* **Rank 0 decides, every rank applies**: at a boundary global rank 0 reads the file, journals
  its decision and broadcasts it (:func:`~curriculum_ds.dynamic.rank0.decide_on_rank0`), so
  every rank holds the same float64 weights without reading the file.
* **The journal** (``mixture_journal.jsonl`` in the run directory,
  :class:`~curriculum_ds.records.journal.MixtureJournal`): each decision is appended and
  fsynced before any rank applies it. A resume does not cut it back: a boundary the resumed run
  reaches again takes the journal's decision (replayed, not re-read), so the resumed run is the
  uninterrupted one even when the file changed or was deleted since; past the journal's end the
  file is read again.
* **A bad read keeps the previous weights**: a missing, unreadable or malformed file, a stream
  without a weight, a name that is not a stream of the phase, a weight that is not a finite
  number > 0: the weights of before hold (the phase's proportions before any read), the history
  row says ``kept_previous`` and why, and rank 0 prints one line (once while the same problem
  lasts). The run never stops for it.

History rows: ``method: "file"``, ``streams``, ``weights``, ``source: {"path", "sha256"}`` (the
file as read at that boundary; ``sha256`` None when it could not be read) and, when the weights
were kept, ``kept_previous: true`` and ``reason``.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from curriculum_ds.dynamic.rank0 import decide_on_rank0
from curriculum_ds.dynamic.registry import register
from curriculum_ds.dynamic.state import FileSourceState, StreamFileState
from curriculum_ds.dynamic.state_common import method_keys
from curriculum_ds.dynamic.update import MixtureUpdate, PhaseView
from curriculum_ds.errors import ConfigError
from curriculum_ds.records.journal import MixtureJournal

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig
    from curriculum_ds.dynamic.state import DynamicState

__all__ = ["FileRead", "FileReweighter", "read_weights"]


class FileRead:
    """One read of the weights file: its sha256 and either normalised weights or a reason.

    Attributes:
        sha256: hex sha256 of the bytes read, None when the file could not be read.
        weights: float64 ``(K,)`` in the phase's stream order, summing to 1, every entry > 0;
            None when the read is refused.
        reason: why the read is refused (one line naming the problem), None when it is not.
    """

    def __init__(
        self,
        sha256: str | None,
        weights: npt.NDArray[np.float64] | None = None,
        reason: str | None = None,
    ) -> None:
        self.sha256 = sha256
        self.weights = weights
        self.reason = reason


def read_weights(path: Path, stream_names: tuple[str, ...] | list[str]) -> FileRead:
    """Read and check the weights file; never raises for what the file holds.

    Args:
        path: the weights file.
        stream_names: the phase's stream names, in its order (``K`` names).

    Returns:
        A :class:`FileRead`: the weights normalised to sum 1 (float64, in ``stream_names``'
        order), or the reason they are refused: the file is missing or unreadable (a folder,
        no permission), not UTF-8 JSON, not a JSON object, lacks a stream, names one the phase
        does not have, or has a weight that is not a finite number > 0 (or weights whose sum
        is not finite). Deterministic in the file's bytes.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return FileRead(None, reason="not found")
    except OSError as exc:
        return FileRead(None, reason=f"cannot be read ({exc.strerror or type(exc).__name__})")
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        loaded = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return FileRead(sha256, reason="not UTF-8 text")
    except json.JSONDecodeError as exc:
        return FileRead(
            sha256, reason=f"not JSON (line {exc.lineno} column {exc.colno}: {exc.msg})"
        )
    if not isinstance(loaded, dict):
        return FileRead(
            sha256, reason=f"not a JSON object of stream name → weight (a {type(loaded).__name__})"
        )
    return _check_weights(loaded, stream_names, sha256)


def _check_weights(
    loaded: Mapping[str, Any], stream_names: tuple[str, ...] | list[str], sha256: str
) -> FileRead:
    """The weights of a decoded file over ``stream_names``, normalised, or why not."""
    names = list(stream_names)
    missing = [n for n in names if n not in loaded]
    if missing:
        return FileRead(sha256, reason=f"no weight for stream(s) {_quoted(missing)}")
    unknown = [n for n in loaded if n not in names]
    if unknown:
        return FileRead(
            sha256,
            reason=f"{_quoted(unknown)}: not a stream of the phase ({_quoted(names)})",
        )
    for name in names:
        value = loaded[name]
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value <= 0:
            return FileRead(
                sha256,
                reason=f"weight of {json.dumps(name)} is {json.dumps(value)}: every weight must "
                "be a finite number > 0",
            )
    values = [float(loaded[n]) for n in names]
    total = sum(values)  # float64, left to right
    if not math.isfinite(total):
        return FileRead(sha256, reason=f"the weights sum to {total!r}: they do not normalise")
    weights = np.array(values, dtype=np.float64) / total
    if not (weights > 0).all():
        return FileRead(sha256, reason=f"the weights sum to {total!r}: they do not normalise")
    return FileRead(sha256, weights=weights)


def _quoted(names: list[str]) -> str:
    return ", ".join(json.dumps(n) for n in names)


@register
class FileReweighter:
    """``method: "file"`` over ``unit: "streams"``: the weights of an operator's file, journaled.

    Lifecycle as every :class:`~curriculum_ds.dynamic.protocol.Reweighter`'s: :meth:`start_phase`,
    then every optimizer step :meth:`observe` (losses do not move it) and
    :meth:`maybe_recompute`, which at a boundary returns the file's weights as ``proportions``
    (or keeps the previous ones). See the module docstring.

    Args:
        cfg: the ``curriculum.dynamic`` section (``method: "file"``, ``file.path``).
    """

    method: ClassVar[str] = "file"
    units: ClassVar[frozenset[str]] = frozenset({"streams"})

    def __init__(self, cfg: DynamicConfig) -> None:
        self.cfg = cfg
        section = cfg.file
        if section is None or section.path is None:  # the config refuses it; a hand-built one
            raise ConfigError(
                'curriculum.dynamic.file: method "file" needs the weights file: '
                '"file": {"path": "mix.json"}'
            )
        self.path = Path(section.path)
        """The weights file, as configured (relative: to rank 0's working directory)."""
        self.phase_idx: int | None = None
        self.stream_names: list[str] = []
        self.probs: npt.NDArray[np.float64] = np.zeros(0, dtype=np.float64)
        """The stream weights now (the phase's proportions until a read is applied)."""
        self.sha256: str | None = None
        """sha256 of the file content whose weights hold now (None: none in this phase)."""
        self.num_recomputes = 0
        self.run_dir: Path | None = None
        self._resumed: bool | None = None  # set by the first start_phase of this process
        self._journal: MixtureJournal | None = None  # rank 0, opened by the first start_phase
        self._last_reason: str | None = None  # rank 0: a refusal is printed once while it lasts

    @property
    def num_buckets(self) -> int:
        """1: samples are drawn uniformly inside a stream."""
        return 1

    def start_phase(self, view: PhaseView, saved: DynamicState | None) -> MixtureUpdate:
        """Start a phase at its own proportions (or, resuming inside it, at the saved weights).

        Args:
            view: the new phase; its ``run_dir`` is where the journal lives.
            saved: a :meth:`state` from a checkpoint, or None. The first phase start of the
                process opens the journal (collective): with a saved state it is a resume (the
                journal is replayed), without one a fresh start (the journal is emptied now, so
                no later resume of this run can replay an earlier run's lines).

        Returns:
            An empty :class:`MixtureUpdate` (the loader restores its own proportions on a
            resume).

        Raises:
            ConfigError: the run has no run directory for the journal (a loop of one's own
                without :class:`~curriculum_ds.RunDir`: set ``curriculum.run_dir``).
            CurriculumError: the journal cannot be opened (on every rank).
        """
        if view.run_dir is None:
            raise ConfigError(
                'curriculum.dynamic.method: "file" journals every read of its weights file in '
                "the run directory, and this run has none: set curriculum.run_dir (RunDir and "
                "CurriculumTrainer set it)"
            )
        self.run_dir = view.run_dir
        if self._resumed is None:
            self._resumed = saved is not None
            decide_on_rank0(self._open_journal)
        self.phase_idx = view.phase_idx
        self.stream_names = list(view.stream_names)
        self.probs = np.asarray(view.proportions, dtype=np.float64).copy()
        self.sha256 = None
        if saved is not None:
            self.num_recomputes = saved.num_recomputes
            if isinstance(saved, StreamFileState) and saved.phase_idx == view.phase_idx:
                self.probs = np.asarray(saved.probs, dtype=np.float64).copy()
                self.sha256 = saved.file.sha256
        return MixtureUpdate()

    def observe(self, batch: npt.NDArray[np.int64], losses: npt.NDArray[np.float64]) -> None:
        """Training losses do not move this method."""

    def observe_eval(self, global_step: int, losses: Mapping[str, float]) -> None:
        """Held-out losses do not move this method."""

    def maybe_recompute(self, global_step: int) -> MixtureUpdate | None:
        """At a boundary: the file's weights (journaled first), or the previous ones.

        Every ``recompute_every_n_steps``; collective (a broadcast from global rank 0).

        Args:
            global_step: the optimizer step just taken (1-based, global).

        Returns:
            None between boundaries; else the :class:`MixtureUpdate` with the file's weights as
            ``proportions`` (from the next step on) and the history row, or, when the read is
            refused, the row alone (``kept_previous: true``, ``reason``).

        Raises:
            CurriculumError: the journal cannot be written (on every rank).
        """
        if global_step % self.cfg.recompute_every_n_steps != 0:
            return None
        self.num_recomputes += 1
        entry = decide_on_rank0(lambda: self._decide(global_step))
        kept = bool(entry.get("kept_previous"))
        if not kept:
            self.probs = np.asarray(entry["weights"], dtype=np.float64)
            self.sha256 = entry.get("sha256")
        record: dict[str, Any] = {
            "method": self.method,
            "unit": "streams",
            "streams": list(self.stream_names),
            "weights": self.probs.tolist(),
            "scores": None,
            "source": {"path": str(self.path), "sha256": entry.get("sha256")},
        }
        if kept:
            record.update(kept_previous=True, reason=str(entry.get("reason")))
            return MixtureUpdate(record=record)
        return MixtureUpdate(proportions=self.probs.copy(), record=record)

    def _decide(self, global_step: int) -> dict[str, Any]:
        """Rank 0: the journal's decision for ``global_step``, or a read journaled now."""
        journal = self._journal
        assert journal is not None  # opened by the first start_phase, on rank 0
        entry = journal.entry(global_step)
        if entry is not None:
            stale = self._stale(entry)
            if stale is None:
                return entry
            print(
                f"curriculum_ds: warning: step {global_step}: {journal.path} has a line for this "
                f"step written for another {stale}; reading {self.path} again",
                file=sys.stderr,
                flush=True,
            )
        read = read_weights(self.path, self.stream_names)
        entry = {
            "step": global_step,
            "phase": self.phase_idx,
            "path": str(self.path),
            "streams": list(self.stream_names),
            "sha256": read.sha256,
        }
        if read.weights is None:
            entry.update(weights=self.probs.tolist(), kept_previous=True, reason=read.reason)
        else:
            entry.update(weights=read.weights.tolist(), kept_previous=False)
        entry["time"] = datetime.now(UTC).isoformat(timespec="seconds")
        journal.append(entry)  # before any rank applies it
        if read.reason is not None and read.reason != self._last_reason:
            print(
                f"curriculum_ds: warning: step {global_step}: mix file {self.path}: {read.reason}; "
                "keeping the previous weights",
                file=sys.stderr,
                flush=True,
            )
        self._last_reason = read.reason
        return entry

    def _stale(self, entry: Mapping[str, Any]) -> str | None:
        """What of a journal line differs from this run's boundary (phase, streams, path)."""
        for key, value in (
            ("phase", self.phase_idx),
            ("streams", self.stream_names),
            ("path", str(self.path)),
        ):
            if entry.get(key) != value:
                return key
        if not entry.get("kept_previous") and len(entry.get("weights") or ()) != len(
            self.stream_names
        ):
            return "weights"
        return None

    def _open_journal(self) -> None:
        """Rank 0: open the run directory's journal (emptied on a fresh start)."""
        assert self.run_dir is not None  # start_phase refuses a run without one
        self._journal = MixtureJournal.open(self.run_dir, fresh=not self._resumed)

    def state(self) -> StreamFileState:
        """Everything a resume needs (:class:`~curriculum_ds.dynamic.state.StreamFileState`).

        The weights, the recompute count, the phase, the file and the sha256 of the content
        applied last; the decisions themselves are in the journal (``mixture_journal.jsonl``).
        Copies.
        """
        return StreamFileState(
            method_keys=method_keys(self.cfg),
            phase_idx=self.phase_idx,
            probs=self.probs.copy(),
            num_recomputes=self.num_recomputes,
            file=FileSourceState(path=str(self.path), sha256=self.sha256),
        )
