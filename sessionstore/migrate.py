"""``sessionstore.migrate`` is now :mod:`sessionstore.schema.migrate` (Alembic from code).

The old path stays importable, as the very same module object, because earlier READMEs named
it; new code imports the new path.
"""

import sys
from typing import TYPE_CHECKING

from .schema import migrate as _moved

if TYPE_CHECKING:
    from .schema.migrate import *  # noqa: F403

sys.modules[__name__] = _moved
