"""Counting checks shared by the Python GPU scripts (run as `python3 test/gpu/<script>.py`)."""
import sys


class Checks:
    """Counts passed and failed checks; a failure is printed at once and the run goes on."""

    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", what, file=sys.stderr, flush=True)

    def summary(self, name):
        """Prints "<name>: N passed, N failed"; the exit status: 1 on a failure."""
        print(f"{name}: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
