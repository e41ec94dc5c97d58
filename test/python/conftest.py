"""pytest setup: the rill package from python/ and librill.so from RILL_LIB (set by
`make pytest`), else the library next to the source tree."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("RILL_LIB", os.path.join(ROOT, "lib", "librill.so"))
