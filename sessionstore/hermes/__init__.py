"""Hermes's own module, literally: :mod:`sessionstore.hermes.state` is a drop-in for a Hermes
checkout's ``hermes_state.py`` (its private ``_conn``/``_lock`` included), with the module
helpers Hermes's gateway, CLI and tools import beside ``SessionDB``
(:mod:`~sessionstore.hermes.helpers`) and Hermes's trajectory files
(:mod:`~sessionstore.hermes.trajectory`).
"""
