from pathlib import Path

import pytest
from helpers import tiny_experiment


@pytest.fixture(scope="session")
def tiny_experiment_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny 2-arm × 2-seed experiment (helpers.tiny_experiment), its data built once for
    every ablate unit test; tests copy it before they change it."""
    return tiny_experiment(tmp_path_factory.mktemp("ablate_data"))
