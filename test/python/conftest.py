"""pytest setup.

The tests import the installed ``rill`` package: ``make pytest`` installs it into .venv with pip
and sets RILL_TEST_INSTALLED=1, and this file then checks that ``rill`` was not picked up from
the source tree. During development, ``make pyext`` builds the extension in place and
``PYTHONPATH=python .venv/bin/python -m pytest test/python/...`` runs against it.

Environment: RILL_BIN (the command-line tool), RILL_CORPUS (an ImageFolder corpus, default
build/data/corpus, made by ``make data``).
"""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def pytest_configure(config):
    """Fails early when the tests would not run against the installed package."""
    if os.environ.get("RILL_TEST_INSTALLED") != "1":
        return
    import rill
    where = pathlib.Path(rill.__file__).resolve()
    if (ROOT / "python") in where.parents:
        raise pytest.UsageError(f"rill was imported from the source tree ({where}), "
                                "not from the installed package")


@pytest.fixture(scope="session")
def root():
    """The repository root."""
    return ROOT


@pytest.fixture(scope="session")
def corpus():
    """The demo ImageFolder corpus (10 classes of JPEGs); skips when it was not made."""
    path = pathlib.Path(os.environ.get("RILL_CORPUS", ROOT / "build" / "data" / "corpus"))
    if not path.is_dir():
        pytest.skip(f"no image corpus at {path} (run `make data`)")
    return path


@pytest.fixture
def variable_shape_table():
    """A one-column table of arrow.variable_shape_tensor uint8 cells with uniform shape
    [None, 3]: [[1, 2, 3], [4, 5, 6]], null, [[7, 8, 9]]."""
    import pyarrow as pa
    storage = pa.StructArray.from_arrays(
        [pa.array([[1, 2, 3, 4, 5, 6], None, [7, 8, 9]], pa.list_(pa.uint8())),
         pa.array([[2, 3], None, [1, 3]], pa.list_(pa.int32(), 2))],
        names=["data", "shape"], mask=pa.array([False, True, False]))
    field = pa.field("img", storage.type, metadata={
        b"ARROW:extension:name": b"arrow.variable_shape_tensor",
        b"ARROW:extension:metadata": b'{"uniform_shape":[null,3]}'})
    return pa.Table.from_arrays([storage], schema=pa.schema([field]))
