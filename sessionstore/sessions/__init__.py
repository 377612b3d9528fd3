"""The sessions domain: every rule of Hermes's session store, as typed operations in Core SQL.

The repository is assembled from one module per concern (lifecycle, messages, listing,
lineage, titles, deletion, rewind, windows, leases, gateway, maintenance, stats); each runs its
statements through :class:`~sessionstore.storage.store.Store` and holds no engine state.
"""
