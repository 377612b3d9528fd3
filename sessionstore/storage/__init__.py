"""How a store is opened and written: where it lives (config), the one engine per store, the
unit of work (:class:`~sessionstore.storage.store.Store`), the retry with jitter, the writers'
queue, fork safety, the async store, and the translation of driver errors into typed ones.
"""
