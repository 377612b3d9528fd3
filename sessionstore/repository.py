"""``sessionstore.repository`` is now :mod:`sessionstore.sessions.repository`
(the typed repository).

The old path stays importable, as the very same module object, because earlier READMEs named
it; new code imports the new path.
"""

import sys
from typing import TYPE_CHECKING

from .sessions import repository as _moved

if TYPE_CHECKING:
    from .sessions.repository import *  # noqa: F403

sys.modules[__name__] = _moved
