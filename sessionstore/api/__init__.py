"""The faces users import: ``SessionDB`` (Hermes's API, sync), ``AsyncSessionDB`` (the same as
coroutines) and ``AsyncSessionRepository`` (the typed repository as coroutines).

Each face speaks to the domain (:mod:`sessionstore.sessions`) and the store
(:mod:`sessionstore.storage`); none holds SQL of its own.
"""
