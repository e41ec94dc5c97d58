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
import signal
import sys
import traceback
import warnings

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


@pytest.fixture
def in_forked_child():
    """run(check): calls check() in a forked child (skipped where there is no os.fork) and
    fails the test unless the child exits with 0: check() returned, within 30 s (an alarm
    ends a hang); a failed assertion or any exception in it prints its traceback and exits 1."""
    if not hasattr(os, "fork"):
        pytest.skip("no os.fork on this platform")

    def run(check):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads running
            pid = os.fork()
        if pid == 0:
            signal.alarm(30)
            code = 0
            try:
                check()
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the child ended with status {status:#x}"

    return run
