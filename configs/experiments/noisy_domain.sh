#!/usr/bin/env bash
# The noisy-domain ablation, end to end (docs/ablate.md, "The shipped experiments"):
#   1. the demo's data with its noise stream (curriculum-ds demo --data-only);
#   2. the reference run: a uniform mix over docstrings, code and noise on twice the tokens, its
#      final model exported (configs/experiments/noisy_reference.json);
#   3. that model's loss on every training sample, as the metric column ref_loss
#      (curriculum-ds score), which the streams_excess arm reads;
#   4. curriculum-ds ablate configs/experiments/noisy_domain.json --out runs/ablate-noisy.
#
# Run it from the folder that holds (or is to hold) demo_run/, e.g. the repository root:
#   bash configs/experiments/noisy_domain.sh
# Idempotent: a step already done is skipped, an interrupted run resumes (the reference run from
# its checkpoint, ablate its own way), so run it again after a failure.
# Environment: CURRICULUM_DS (the command, default curriculum-ds), NUM_GPUS (ranks per run,
# default 2: the global batch of 16 samples the experiment was tuned with).
set -euo pipefail

CDS=${CURRICULUM_DS:-curriculum-ds}
NUM_GPUS=${NUM_GPUS:-2}
EXP_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DATA=demo_run/data
REF_RUN=runs/noisy-reference
REF_MODEL=runs/noisy-reference-model
OUT=runs/ablate-noisy
STREAMS=(docstrings code noise)

# 1. the data: train and held-out val of each stream
data_ready=1
for split in train val; do
    for s in "${STREAMS[@]}"; do
        [[ -f $DATA/$split/$s/curriculum_meta.json ]] || data_ready=0
    done
done
if ((data_ready)); then
    echo "[1/4] demo data: present in $DATA"
else
    echo "[1/4] demo data: building"
    $CDS demo --data-only
fi

# 2. the reference run and its exported model
if [[ -f $REF_MODEL/config.json ]]; then
    echo "[2/4] reference model: present in $REF_MODEL"
else
    echo "[2/4] reference run: $REF_RUN, model to $REF_MODEL"
    rm -rf "$REF_MODEL" # a partial export; the run resumes from its last checkpoint
    mkdir -p runs
    $CDS launch "$EXP_DIR/noisy_reference.json" --num-gpus "$NUM_GPUS" -- \
        --run-dir "$REF_RUN" --resume auto --export-final "$REF_MODEL" --no-progress
    [[ -f $REF_MODEL/config.json ]] || $CDS export "$REF_RUN/checkpoints" "$REF_MODEL"
fi

# 3. ref_loss on every training sample (skipped when every stream lists the column)
scored=1
for s in "${STREAMS[@]}"; do
    python3 -c 'import json, sys
meta = json.load(open(sys.argv[1]))
sys.exit(0 if "ref_loss" in meta.get("metric_columns", []) else 1)' \
        "$DATA/train/$s/curriculum_meta.json" || scored=0
done
if ((scored)); then
    echo "[3/4] ref_loss: already scored"
else
    echo "[3/4] scoring ref_loss under $REF_MODEL"
    $CDS score $DATA/train/docstrings $DATA/train/code $DATA/train/noise \
        --model "$REF_MODEL" --column ref_loss
fi

# 4. the ablation: 4 arms x 3 seeds (finished runs are skipped)
echo "[4/4] ablate: $OUT"
$CDS ablate "$EXP_DIR/noisy_domain.json" --out "$OUT" --num-gpus "$NUM_GPUS"
