"""The mixture search on RegMix's published runs: ``python bench/bench_mixopt_regmix.py``.

Issue 34, acceptance "RegMix's published runs" and "Figures": each regressor (``lightgbm``,
``log_linear``) is fitted per Pile domain on the 512 1M-parameter proxy runs
(``tests/data/regmix/``, MIT), then ranks the held-out runs of each size (256 at 1M, 256 at 60M,
64 at 1B): the Spearman rank correlation per domain, its mean and its worst domain. Timed: the fit
of the 13 domains' regressions on the 512 runs (one thread), and the proposal at the CLI's
defaults (100,000 candidates, the best 128 averaged; ``--bootstrap`` refits for the interval, 0 by
default here: each lightgbm refit costs as much as the fit).

Example: ``python bench/bench_mixopt_regmix.py [--bootstrap 20] [--regressors lightgbm]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from curriculum_ds.mixopt.constraints import Bounds
from curriculum_ds.mixopt.crossval import rank_quality
from curriculum_ds.mixopt.propose import SearchSettings, propose
from curriculum_ds.mixopt.regressors import REGRESSORS, fit_model
from curriculum_ds.mixopt.tables import read_swarm_csv

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "regmix"
SIZES = ("1m", "60m", "1B")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regressors", default=",".join(REGRESSORS))
    parser.add_argument("--bootstrap", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    train = read_swarm_csv(DATA / "train_pile_loss_1m.csv", DATA / "train_mixture_1m.csv")
    tests = {
        s: read_swarm_csv(DATA / f"test_pile_loss_{s}.csv", DATA / f"test_mixture_{s}.csv")
        for s in SIZES
    }
    streams = len(train.streams)
    prior = np.full(streams, 1.0 / streams)
    bounds = Bounds(np.zeros(streams), np.ones(streams))
    weights = np.full(len(train.loss_names), 1.0 / len(train.loss_names))
    for regressor in args.regressors.split(","):
        started = time.perf_counter()
        models = [
            fit_model(regressor, train.mixtures, train.losses[:, s], n_jobs=args.threads)  # type: ignore[arg-type]
            for s in range(len(train.loss_names))
        ]
        fit_s = time.perf_counter() - started
        for size, test in tests.items():
            rhos = np.array(
                [
                    rank_quality(m.predict(test.mixtures), test.losses[:, s]).spearman
                    for s, m in enumerate(models)
                ]
            )
            worst = test.loss_names[int(rhos.argmin())]
            print(
                f"{regressor:<10} {size:>3}: {len(test.keys)} runs, Spearman mean {rhos.mean():.4f}"
                f", worst {rhos.min():.4f} ({worst})"
            )
        started = time.perf_counter()
        propose(
            regressor,  # type: ignore[arg-type]
            models,
            train.mixtures,
            train.losses,
            prior=prior,
            bounds=bounds,
            target_weights=weights,
            kl_weight=0.0,
            settings=SearchSettings(bootstrap=args.bootstrap),
            n_jobs=args.threads,
        )
        propose_s = time.perf_counter() - started
        print(
            f"{regressor:<10} fit of {len(models)} domains, {len(train.keys)} runs: {fit_s:.2f} s;"
            f" proposal (100,000 candidates, bootstrap {args.bootstrap}): {propose_s:.2f} s"
        )


if __name__ == "__main__":
    main()
