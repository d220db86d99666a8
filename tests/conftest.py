"""Shared fixtures: every backend test runs on NumPy, and on CuPy where a GPU is usable.

Test modules are imported in pytest's importlib mode (see pyproject.toml), so basenames may
repeat across folders and helpers shared between modules are fixtures, never imports.
"""

import json

import numpy as np
import pytest

from gpu.backend import get_backend, gpu_available

HAVE_GPU = gpu_available()


def pytest_collection_modifyitems(config, items):
    if HAVE_GPU:
        return
    skip = pytest.mark.skip(reason="needs a usable CUDA GPU and CuPy")
    for item in items:
        # the marker, not item.keywords: keywords hold the folder names too, and tests/gpu is one
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def backend(request):
    return get_backend(request.param)


@pytest.fixture
def cupy_backend():
    return get_backend("cupy")


@pytest.fixture(autouse=True)
def _private_default_db(tmp_path, monkeypatch):
    """No test reads or writes the working directory's results database or device profiles
    (``level="auto"`` reads the profile of the device it runs on)."""
    monkeypatch.setenv("GEMMLAB_DB", str(tmp_path / "default.sqlite"))
    monkeypatch.setenv("GEMMLAB_PROFILES", str(tmp_path / "profiles"))


@pytest.fixture(autouse=True)
def _small_host_cache_flush(monkeypatch):
    """The NumPy backend flushes the host's caches before a timed sample by reading twice its last-level cache
    (600 MB where the CPU reports 300 MB: 30 ms a sample, more than half of the suite's time). Tests check what is
    measured and stored, not how fast, so they read 1 MiB."""
    monkeypatch.setattr(get_backend("numpy"), "_flush_buffer", np.zeros(2**17))


@pytest.fixture
def row_panels_at_any_size(monkeypatch):
    """Scheme II takes its direct layout in row panels however little work a panel's GEMM does: the tests of the
    panels' mechanics run on small products, below :data:`gpu.ozaki2.memory.MIN_PANEL_WORK` (where the default
    takes the planes layout instead)."""
    from gpu import ozaki2
    from gpu.ozaki2 import memory

    ozaki2.PLANS.clear()                  # no plan kept in another layout serves this test, nor this test's a later one
    monkeypatch.setattr(memory, "MIN_PANEL_WORK", 0)
    yield
    ozaki2.PLANS.clear()


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "results.sqlite"


@pytest.fixture(scope="session")
def h100_db(tmp_path_factory):
    """A database holding the published H100 calibration and the Strassen speed-ups measured in the
    same environment (real measurements, power regime not recorded): what the predictors are judged
    on. Those Strassen rows left the published results when the Strassen speed-ups were re-measured with
    the regime recorded (in another environment, without a calibration yet); they are kept here,
    in ``tests/data``, for the predictor tests only."""
    from pathlib import Path

    from experiments.core.database import ResultsDB

    root = Path(__file__).resolve().parent
    path = tmp_path_factory.mktemp("h100") / "h100.sqlite"
    with ResultsDB(path) as db:
        db.import_csv(root.parent / "results" / "published" / "h100-calibration.csv")
        db.import_csv(root / "data" / "h100-strassen-unrecorded.csv")
    return path


@pytest.fixture(scope="session")
def published_db(tmp_path_factory):
    """A database holding every published H100 export (calibration, Strassen, level validation,
    Ozaki): the real measurements the committed figures are drawn from."""
    from pathlib import Path

    from experiments.core.database import ResultsDB

    published = Path(__file__).resolve().parent.parent / "results" / "published"
    path = tmp_path_factory.mktemp("published") / "published.sqlite"
    with ResultsDB(path) as db:
        for csv_file in sorted(published.glob("*.csv")):
            db.import_csv(csv_file)
    return path


@pytest.fixture
def run_json(capsys):
    """``run_json(*argv) -> dict``: runs ``gemmlab *argv --json`` in this process and returns the
    JSON document it printed; the test fails, showing stderr and stdout, unless it exits 0."""
    from experiments import cli

    def run(*argv) -> dict:
        command = ["gemmlab", *map(str, argv), "--json"]
        code = cli.main(command[1:])
        captured = capsys.readouterr()
        shown = f"{' '.join(command)}\nstderr:\n{captured.err}\nstdout:\n{captured.out}"
        assert code == 0, f"exit code {code} from {shown}"
        try:
            return json.loads(captured.out)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"no JSON on stdout ({exc}) from {shown}") from None

    return run
