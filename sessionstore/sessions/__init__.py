"""The sessions domain: every rule of Hermes's session store, as typed operations in Core SQL.

:class:`~.repository.SessionRepository` is assembled from one part per concern (lifecycle,
messages, rewind, listing, lineage, titles, deletion, windows, leases, gateway, maintenance),
each a class over the same :class:`~sessionstore.storage.store.Store` holding no engine state;
:mod:`.shared` holds what the parts share, :mod:`.access` the read/write mark each method
carries for the async faces. :mod:`.transcripts` (Hermes's transcript files of deleted
sessions) and :mod:`.stats` (usage figures, loaded only by the CLI) are plain functions.
"""
