from . import _rill as _rill
from ._rill import *
from ._rill import __version__ as __version__
