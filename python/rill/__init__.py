"""rill: a pull-based streaming dataframe that feeds machine-learning training loops.

Everything here comes from the compiled extension ``rill._rill``, a thin layer over the C
library: ``rill.DataFrame`` mirrors ``rill_df_t``, ``rill.Iterator`` ``rill_iter_t``,
``rill.Row`` ``rill_row_t`` and ``rill.Array`` ``rill_array_t``. ``rill.torch`` holds a loader
for PyTorch training loops.
"""
from . import _rill
from ._rill import *  # noqa: F401,F403
from ._rill import __all__, __version__  # noqa: F401
