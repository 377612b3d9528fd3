"""``sessionstore.transfer`` is now :mod:`sessionstore.ops.transfer` (export, import and copy).

The old path stays importable, as the very same module object, because earlier READMEs named
it; new code imports the new path.
"""

import sys
from typing import TYPE_CHECKING

from .ops import transfer as _moved

if TYPE_CHECKING:
    from .ops.transfer import *  # noqa: F403

sys.modules[__name__] = _moved
