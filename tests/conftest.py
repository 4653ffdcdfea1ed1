import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def no_token_reader(monkeypatch):
    """Loaders that never read tokens (``fetch``) get their real metadata, metric columns and
    samplers, but no streaming reader. Each StreamingDataset keeps shared-memory file descriptors
    open for the life of the process (``PhaseLoader.close`` cannot release them), and dozens of
    loaders in one pytest process would run out of them."""
    monkeypatch.setattr(
        "curriculum_ds.core.sample_reader.open_stream", lambda local, remote=None: None
    )


_LOCAL_RANK_AT_START = os.environ.get("LOCAL_RANK")


@pytest.fixture(autouse=True)
def _no_leaked_local_rank(monkeypatch):
    """Each test starts with the session's ``LOCAL_RANK``: a test that ran the reference loop in
    process left it set (``distributed.resolve_local_rank`` sets it, as the launcher would),
    which makes the next test look like a launched rank."""
    if os.environ.get("LOCAL_RANK") != _LOCAL_RANK_AT_START:
        if _LOCAL_RANK_AT_START is None:
            monkeypatch.delenv("LOCAL_RANK")
        else:
            monkeypatch.setenv("LOCAL_RANK", _LOCAL_RANK_AT_START)


@pytest.fixture(autouse=True, scope="session")
def _no_stale_shared_memory():
    """Start without the shared-memory files a killed run of an earlier session left behind
    (helpers.unlink_stale_shared_memory; each launch also clears them before it starts)."""
    from helpers import unlink_stale_shared_memory

    unlink_stale_shared_memory()
    return


@pytest.fixture(scope="session")
def shared_job(request, tmp_path_factory):
    """The launched runs of every selected module's ``@shared_runs`` generator, in one launched
    job per round (``tests/shared_job.py``); ``shared_job(builder)``: what ``builder`` returned."""
    from shared_job import SharedJob

    return SharedJob(request.session, tmp_path_factory)


def pytest_collection_modifyitems(items):
    """The tests that use the shared job get pytest-timeout's 900 s once per shared-runs
    generator more: the first of them to run waits for the whole job (its launches have their
    own subprocess timeouts, tests/shared_job.py)."""
    from shared_job import builders_of

    modules = {item.module.__name__ for item in items if hasattr(item, "module")}
    builders = sum(len(builders_of(name)) for name in modules)
    for item in items:
        if builders and "shared_job" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(900 * (1 + builders)))
