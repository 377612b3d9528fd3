"""``sessionstore.stats`` is now :mod:`sessionstore.sessions.stats` (usage figures).

The old path stays importable, as the very same module object, because earlier READMEs named
it; new code imports the new path.
"""

import sys
from typing import TYPE_CHECKING

from .sessions import stats as _moved

if TYPE_CHECKING:
    from .sessions.stats import *  # noqa: F403

sys.modules[__name__] = _moved
