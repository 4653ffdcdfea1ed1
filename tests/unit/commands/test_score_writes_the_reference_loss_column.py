"""`curriculum-ds score` writes each sample's mean token loss under a reference model as a column.

The column equals a one-sample-at-a-time forward (no padding, the loss written out here) and the
training step's own per-sample loss (``collate`` + ``per_sample_token_losses``, sum / count);
the shards, ``index.json`` and the other columns stay byte for byte; the training side reads the
column (``read_stream_info(...).metrics[NAME]``); one summary line per folder; ``--overwrite``
replaces a column.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from score_fixtures import (
    folder_bytes,
    invoke,
    metrics_members,
    one_at_a_time,
    samples,
    tiny_gpt2,
    two_folders,
)

from curriculum_ds.data import read_stream_info


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_gpt2(tmp_path_factory.mktemp("model"))


def _training_side_losses(model_dir: Path, ids: list[np.ndarray]) -> np.ndarray:
    """The step's per-sample loss: one padded micro-batch, per_sample_token_losses, sum / count."""
    import torch
    from transformers import AutoModelForCausalLM

    from curriculum_ds.core.loss import per_sample_token_losses
    from curriculum_ds.core.microbatch import collate

    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    mb = collate(ids, np.arange(len(ids), dtype=np.int64))
    with torch.no_grad():
        logits = model(mb.input_ids, attention_mask=mb.attention_mask).logits
        sums, valid = per_sample_token_losses(logits, mb.labels)
    return (sums.double() / valid.double()).numpy()


def test_column_is_each_samples_mean_token_loss_under_the_model(
    tmp_path: Path, model_dir: Path
) -> None:
    code, prose = two_folders(tmp_path)
    result = invoke(code, prose, "--model", model_dir, "--column", "ref_loss",
                    "--batch-size", 5, "--device", "cpu")  # fmt: skip
    assert result.exit_code == 0, result.output
    for folder in (code, prose):
        ids = samples(folder)
        assert len({len(s) for s in ids}) > 3  # ragged: batches are padded
        written = read_stream_info(folder).metrics["ref_loss"]  # what training reads
        assert written.dtype == np.float64
        assert written.shape == (len(ids),)
        np.testing.assert_allclose(written, one_at_a_time(model_dir, ids), rtol=0, atol=1e-5)
        np.testing.assert_allclose(
            written, _training_side_losses(model_dir, ids), rtol=0, atol=1e-5
        )


def test_shards_index_and_other_columns_are_unchanged_byte_for_byte(
    tmp_path: Path, model_dir: Path
) -> None:
    code, _ = two_folders(tmp_path)
    before = folder_bytes(code)
    members = metrics_members(code)
    meta = json.loads((code / "curriculum_meta.json").read_text())
    result = invoke(code, "--model", model_dir, "--column", "ref_loss", "--device", "cpu")
    assert result.exit_code == 0, result.output
    after = folder_bytes(code)
    changed = {name for name in before if before[name] != after.get(name)}
    assert changed == {"metrics.npz", "curriculum_meta.json"}
    assert set(after) == set(before)  # no temporary file left behind
    new_members = metrics_members(code)
    assert set(new_members) == {*members, "ref_loss.npy"}
    assert all(new_members[name] == data for name, data in members.items())
    new_meta = json.loads((code / "curriculum_meta.json").read_text())
    assert new_meta == {**meta, "metric_columns": [*meta["metric_columns"], "ref_loss"]}


def test_one_summary_line_per_folder(tmp_path: Path, model_dir: Path) -> None:
    code, prose = two_folders(tmp_path)
    result = invoke(code, prose, "--model", model_dir, "--column", "ref_loss", "--device", "cpu")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 2, result.output
    for line, folder in zip(lines, (code, prose), strict=True):
        info = read_stream_info(folder)
        m = re.fullmatch(
            rf"scored {re.escape(str(folder))}: (\S+) samples, (\S+) tokens in \d+\.\d s "
            r"\((\S+) tokens/s\), mean loss (\d+\.\d{4}) nats; wrote metric column \"ref_loss\"",
            line,
        )
        assert m is not None, line
        assert int(m.group(1).replace(",", "")) == info.num_samples
        assert int(m.group(2).replace(",", "")) == info.num_tokens
        # the token-weighted mean over loss-bearing tokens (one fewer than tokens per sample)
        valid = info.metrics["num_tokens"] - 1
        mean = float((info.metrics["ref_loss"] * valid).sum() / valid.sum())
        assert float(m.group(4)) == pytest.approx(mean, abs=1e-4)


def test_overwrite_replaces_the_column(tmp_path: Path, model_dir: Path) -> None:
    code, _ = two_folders(tmp_path)
    first = invoke(code, "--model", model_dir, "--column", "ref_loss", "--device", "cpu")
    assert first.exit_code == 0, first.output
    other = tiny_gpt2(tmp_path / "other", vocab_size=300)  # other weights (another shape)
    again = invoke(code, "--model", other, "--column", "ref_loss", "--device", "cpu",
                   "--overwrite")  # fmt: skip
    assert again.exit_code == 0, again.output
    info = read_stream_info(code)
    np.testing.assert_allclose(
        info.metrics["ref_loss"], one_at_a_time(other, samples(code)), rtol=0, atol=1e-5
    )
    meta = json.loads((code / "curriculum_meta.json").read_text())
    assert meta["metric_columns"].count("ref_loss") == 1


def test_a_sample_without_a_loss_bearing_token_scores_zero(tmp_path: Path, model_dir: Path) -> None:
    from helpers import make_dataset

    # packed rows of 16 tokens: documents of 15 and 2 tokens (EOS included) leave a 1-token row
    folder = make_dataset(tmp_path, "packed", ["a" * 14, "b"], max_seq_len=16, pack=True)
    assert read_stream_info(folder).metrics["num_tokens"].tolist() == [16, 1]
    result = invoke(folder, "--model", model_dir, "--column", "ref_loss", "--device", "cpu")
    assert result.exit_code == 0, result.output
    written = read_stream_info(folder).metrics["ref_loss"]
    # the step's loss of a 1-token sample is NaN and left out; validate needs a finite value
    assert written[1] == 0.0
    np.testing.assert_allclose(
        written[:1], one_at_a_time(model_dir, samples(folder)[:1]), rtol=0, atol=1e-5
    )


def test_validate_accepts_the_column_score_wrote(tmp_path: Path, model_dir: Path) -> None:
    from click.testing import CliRunner
    from helpers import two_phase_curriculum, write_ds_config

    from curriculum_ds.cli import main

    code, prose = two_folders(tmp_path)
    result = invoke(code, prose, "--model", model_dir, "--column", "ref_loss", "--device", "cpu")
    assert result.exit_code == 0, result.output
    curriculum = two_phase_curriculum(code, prose)
    curriculum["dynamic"] = {
        "enabled": True,
        "unit": "streams",
        "signal": "excess_loss",
        "reference_metric": "ref_loss",
    }
    cfg = write_ds_config(tmp_path / "ds.json", curriculum)
    checked = CliRunner().invoke(main, ["validate", str(cfg), "--model", str(model_dir)])
    assert checked.exit_code == 0, checked.output


def test_a_qa_record_is_scored_on_its_answer_only(tmp_path: Path, model_dir: Path) -> None:
    """A QA folder (``prepare --format qa``): the column is the answer's (and EOS's) mean loss,
    as the training step's labels bear only those."""
    import torch
    import torch.nn.functional as F
    from helpers import make_qa_dataset, qa_records
    from transformers import AutoModelForCausalLM

    folder = make_qa_dataset(tmp_path, "qa", qa_records(7, seed=2))
    result = invoke(folder, "--model", model_dir, "--column", "ref_loss", "--batch-size", 3,
                    "--device", "cpu")  # fmt: skip
    assert result.exit_code == 0, result.output
    info = read_stream_info(folder)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    want = []
    with torch.no_grad():
        for ids, prompt_len in zip(samples(folder), info.metrics["prompt_len"], strict=True):
            x = torch.from_numpy(ids)[None]
            logits = model(x).logits[0, prompt_len - 1 : -1]
            want.append(float(F.cross_entropy(logits, x[0, prompt_len:])))
    np.testing.assert_allclose(info.metrics["ref_loss"], want, rtol=0, atol=1e-5)
