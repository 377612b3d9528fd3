"""Our side of a side-by-side test: the steps a real Hermes runs (``real_hermes_driver.calls``)
run on our ``SessionDB``, with the driver's semantics, so the two answer lists compare index by
index.

The step language is the driver's: ``(method, args, kwargs)``; ``$sql`` runs one statement
(named ``:parameters``) on the store's own connection and answers None; ``$select`` answers its
rows as dicts; ``"$raises:" + method`` answers the name of what the call raised (None when it
returned); an argument ``{"$path": ...}`` is passed as a ``Path``. Each step gets a fresh copy
of its arguments, as the driver's subprocess gets them from JSON: a method that stamps the dicts
it is given (a batch append) must not change a later step's arguments.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP, SQL_STEP, argument

from sessionstore.api.session_db import SessionDB

Step = tuple[str, list[Any], dict[str, Any]]
ErrorName = Callable[[Exception], str]
AskIot = Callable[[str, list[Step]], list[Any]]
"""The ``ask_iot`` fixture (``tests/hermes/conftest.py``): ``ask_iot(name, steps)`` answers
what the real iot 0.22.2 answers to ``steps`` on a new file."""


def class_name(error: Exception) -> str:
    """What the driver answers for a ``$raises:`` step: the exception's own class name."""
    return type(error).__name__


def builtin_base_name(error: Exception) -> str:
    """The built-in class an error is: for comparing our typed errors (subclasses of the
    built-in ones a Hermes raises, e.g. ``TranscriptChangedError(RuntimeError)``) by kind."""
    return next(cls.__name__ for cls in type(error).__mro__ if cls.__module__ == "builtins")


def as_printed(value: Any) -> Any:
    """``value`` as JSON gives it back, anything else as its repr (how answers are compared)."""
    return json.loads(json.dumps(value, default=repr))


def run_steps(db: SessionDB, steps: list[Step], *, error_name: ErrorName = class_name) -> list[Any]:
    """Each step's answer from ``db``, unnormalised (``as_printed`` and a test's own
    normalisation come after). ``error_name`` names what a ``$raises:`` step raised."""
    results: list[Any] = []
    for name, args, kwargs in json.loads(json.dumps(steps)):
        if name in (SQL_STEP, SELECT_STEP):
            results.append(_statement(db, name, args[0], args[1] if len(args) > 1 else {}))
        elif name.startswith(RAISES_PREFIX):
            method = getattr(db, name[len(RAISES_PREFIX) :])
            try:
                method(*map(argument, args), **kwargs)  # as the driver: its kwargs as given
            except Exception as error:
                results.append(error_name(error))
            else:
                results.append(None)
        else:
            paths = {key: argument(value) for key, value in kwargs.items()}
            results.append(getattr(db, name)(*map(argument, args), **paths))
    return results


def _statement(db: SessionDB, name: str, statement: str, params: dict[str, Any]) -> Any:
    text = sa.text(statement)
    if name == SQL_STEP:
        db.store.write(lambda conn: conn.execute(text, params))
        return None
    rows = db.store.read(lambda conn: conn.execute(text, params).all())
    return [dict(row._mapping) for row in rows]
