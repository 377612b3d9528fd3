"""``sessionstore.trajectory`` is now :mod:`sessionstore.hermes.trajectory`
(Hermes's trajectory files).

The old path stays importable, as the very same module object, because earlier READMEs named
it; new code imports the new path.
"""

import sys
from typing import TYPE_CHECKING

from .hermes import trajectory as _moved

if TYPE_CHECKING:
    from .hermes.trajectory import *  # noqa: F403

sys.modules[__name__] = _moved
