"""Per-stream accounting of one optimizer step: samples, tokens and token-mean loss per stream.

Every sample of a global batch is a ``(stream_idx, sample_idx)`` pair (the same on every rank),
so the samples and the non-padding input tokens of each stream are known on every rank without
communication. The loss needs the ranks: each rank adds its samples' token-loss sums and
loss-bearing token counts into one float64 vector ``[loss sums per stream, counts per stream]``,
which rides on the step's one statistics all-reduce (:meth:`Step.finish
<curriculum_ds.plugin.step.Step.finish>`): a stream's loss is then the exact sum of its token
losses over all ranks divided by its loss-bearing tokens over all ranks, never a mean of rank
means.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    import numpy.typing as npt

    from curriculum_ds.records.schema import StreamRow

__all__ = ["StreamAccounting"]


class StreamAccounting:
    """One step's per-stream counts, and the local loss sums that the ranks add up.

    Args:
        names: the phase's stream names, in ``stream_idx`` order (unique within a phase).
        samples: the global batch, int64 ``(global_batch_size, 2)`` of ``(stream_idx,
            sample_idx)``.
        stream_tokens: int64 ``(num_streams,)``, non-padding input tokens of the global batch per
            stream (:meth:`PhaseLoader.stream_tokens <curriculum_ds.core.loader.PhaseLoader.
            stream_tokens>`).
        positions: this rank's positions in the global batch, int64 ``(samples per rank,)``, in
            the order of its micro-batches' rows.
        device: where the loss sums live (the engine's device).
    """

    def __init__(
        self,
        names: list[str],
        samples: npt.NDArray[np.int64],
        stream_tokens: npt.NDArray[np.int64],
        positions: npt.NDArray[np.int64],
        device: torch.device | str,
    ) -> None:
        self.names = names
        self.num_streams = len(names)
        self.num_samples = np.bincount(samples[:, 0], minlength=self.num_streams)
        self.tokens = stream_tokens
        self._stream_idx = torch.from_numpy(np.ascontiguousarray(samples[positions, 0])).to(device)
        self._device = device

    def local_sums(self, loss_sums: torch.Tensor, num_valid: torch.Tensor) -> torch.Tensor:
        """This rank's ``[token-loss sum per stream..., loss-bearing tokens per stream...]``.

        Args:
            loss_sums: float64 ``(samples per rank,)``, each sample's sum of token losses (nats).
            num_valid: float64 ``(samples per rank,)``, each sample's loss-bearing tokens.

        Returns:
            float64 ``(2 * num_streams,)`` on the device; summed over ranks by the caller.
        """
        out = torch.zeros(2 * self.num_streams, dtype=torch.float64, device=self._device)
        out[: self.num_streams].index_add_(0, self._stream_idx, loss_sums)
        out[self.num_streams :].index_add_(0, self._stream_idx, num_valid)
        return out

    def loss_sum(self, global_sums: torch.Tensor) -> float:
        """The step's token losses over every stream and rank (nats).

        From :meth:`local_sums` summed over ranks: the numerator of the step's token-mean loss.
        """
        return float(sum(global_sums[: self.num_streams].tolist()))

    def records(self, global_sums: torch.Tensor) -> dict[str, StreamRow]:
        """The ``streams`` field of the metrics row, from :meth:`local_sums` summed over ranks.

        Returns:
            ``{name: {"samples": int, "tokens": int, "loss": float | None}}`` for every stream
            of the phase, in stream order: ``loss`` (nats) is the token-mean over the stream's
            loss-bearing tokens of the step on all ranks, None when it has none (no sample of
            the stream in this step, or only samples without loss-bearing tokens) or when it is
            NaN/inf (a non-finite step; metrics rows are strict JSON).
        """
        values = global_sums.tolist()
        n = self.num_streams
        out: dict[str, StreamRow] = {}
        for s, name in enumerate(self.names):
            loss = values[s] / values[n + s] if values[n + s] > 0 else None
            out[name] = {
                "samples": int(self.num_samples[s]),
                "tokens": int(self.tokens[s]),
                "loss": loss if loss is not None and math.isfinite(loss) else None,
            }
        return out
