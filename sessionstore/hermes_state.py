"""Hermes's own module name for the drop-in: ``sessionstore.hermes_state`` *is*
:mod:`sessionstore.hermes.state`, the same module object, so code that patches its names (tests
that set ``hermes_state.DEFAULT_DB_PATH``) patches what ``SessionDB()`` reads.
"""

import sys
from typing import TYPE_CHECKING

from .hermes import state as _moved

if TYPE_CHECKING:
    from .hermes.state import *  # noqa: F403

sys.modules[__name__] = _moved
