"""Hermes's per-model usage table (``session_model_usage``) as revisions 0028 and 0030 build it.

Frozen: only alembic and sqlalchemy, so the revisions behave the same forever.

The table went through two keys. Hermes v20 (issue #51607) keyed a usage row by the session and
the billing route, ``(session_id, model, billing_provider, billing_base_url, billing_mode)``;
v22 (issue #23270) added ``task`` to the key (``''`` for the main agent loop, ``'vision'``,
``'compression'``, ``'title_generation'``... for auxiliary calls). SQLite cannot change a
primary key, so Hermes renames the table away, creates it again and copies the rows; this
module does the same on both databases (:func:`rebuild`), keeping any column a fork added.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers

TABLE = "session_model_usage"
SESSION_INDEX = "idx_session_model_usage_session"
MODEL_INDEX = "idx_session_model_usage_model"
INDEXES = {SESSION_INDEX: ["session_id"], MODEL_INDEX: ["model"]}
ROUTE_KEY = ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode")
"""The v20/v21 key."""
TASK_KEY = (*ROUTE_KEY, "task")
"""The v22 key."""
COUNTERS = (
    "api_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens",
)  # fmt: skip
COSTS = ("estimated_cost_usd", "actual_cost_usd")
LABELS = ("cost_status", "cost_source")
KNOWN = (*TASK_KEY, *COUNTERS, *COSTS, *LABELS, "first_seen", "last_seen")
_EMPTY = sa.text("''")
_ZERO = sa.text("0")


def columns(*, with_task: bool) -> list[sa.Column[Any]]:
    """Hermes 0.19.0's columns in its declared order (``task`` only in the v22 shape)."""
    defined: list[sa.Column[Any]] = [
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        *[
            sa.Column(name, sa.Text(), nullable=False, server_default=_EMPTY)
            for name in ROUTE_KEY[2:]
        ],
    ]
    if with_task:
        defined.append(sa.Column("task", sa.Text(), nullable=False, server_default=_EMPTY))
    defined += [
        *[
            sa.Column(name, helpers.COUNTER, nullable=False, server_default=_ZERO)
            for name in COUNTERS
        ],
        *[sa.Column(name, helpers.REAL, nullable=False, server_default=_ZERO) for name in COSTS],
        *[sa.Column(name, sa.Text()) for name in LABELS],
        sa.Column("first_seen", helpers.REAL),
        sa.Column("last_seen", helpers.REAL),
    ]
    return defined


def create(*, with_task: bool, extra: Sequence[sa.Column[Any]] = ()) -> None:
    """The table in one shape (v20/v21 without ``task``, v22 with it), and its two indexes.

    The only ``ON DELETE CASCADE`` in Hermes's schema: a deleted session takes its usage rows.
    """
    op.create_table(
        TABLE,
        *columns(with_task=with_task),
        *extra,
        sa.PrimaryKeyConstraint(*(TASK_KEY if with_task else ROUTE_KEY), name=f"pk_{TABLE}"),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], ondelete="CASCADE",
            name=f"fk_{TABLE}_session_id_sessions",
        ),
    )  # fmt: skip
    for name, indexed in INDEXES.items():
        op.create_index(name, TABLE, indexed)


def key_has_task() -> bool:
    inspector = sa.inspect(op.get_bind())
    return "task" in (inspector.get_pk_constraint(TABLE).get("constrained_columns") or [])


def rebuild(*, with_task: bool) -> None:
    """Give the table the other key, keeping every row that key can hold.

    To v22 (``with_task``): every row becomes the main loop's (``task = ''``), as Hermes's v22
    step makes them. To v21: the rows of one route are summed into one (tokens, calls and costs
    added, ``first_seen`` the earliest, ``last_seen`` the latest, the cost labels of the main
    loop's row when there is one), so the route's totals, which Insights reads, stay right; what
    is lost is only which share was an auxiliary task's. A column a fork added is kept (on the
    way down, the value of the main loop's row, else any row's).
    """
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    old = f"{TABLE}_rebuild"
    present = inspector.get_columns(TABLE)
    had_task = any(column["name"] == "task" for column in present)
    extra = [
        sa.Column(column["name"], column["type"])
        for column in present
        if column["name"] not in KNOWN
    ]
    for index in inspector.get_indexes(TABLE):
        if index["name"]:
            op.drop_index(index["name"], table_name=TABLE)
    op.rename_table(TABLE, old)
    if bind.dialect.name != "sqlite":
        # PostgreSQL names a key's index in the schema: free the name for the new table.
        key_name = sa.inspect(bind).get_pk_constraint(old).get("name")
        if key_name:
            op.drop_constraint(key_name, old, type_="primary")
    create(with_task=with_task, extra=extra)
    extra_names = [column.name for column in extra]
    if with_task:
        kept = [name for name in KNOWN if name != "task"] + extra_names
        listed = ", ".join(_quoted(name) for name in kept)
        # A plain ``task`` column (a reconciler added it before the key had it: #73823) keeps
        # its values; rows unique on the route are unique on the route and task too.
        task = "COALESCE(task, '')" if had_task else "''"
        bind.execute(
            sa.text(f"INSERT INTO {TABLE} ({listed}, task) SELECT {listed}, {task} FROM {old}")
        )
    else:
        main_first = "CASE WHEN task = '' THEN {0} END"
        picked = [
            f"COALESCE(MAX({main_first.format(_quoted(name))}), MAX({_quoted(name)}))"
            for name in (*LABELS, *extra_names)
        ]
        selected = [
            *ROUTE_KEY,
            *[f"SUM({name})" for name in (*COUNTERS, *COSTS)],
            *picked,
            "MIN(first_seen)",
            "MAX(last_seen)",
        ]
        target = [*ROUTE_KEY, *COUNTERS, *COSTS, *LABELS, *extra_names, "first_seen", "last_seen"]
        bind.execute(
            sa.text(
                f"INSERT INTO {TABLE} ({', '.join(_quoted(name) for name in target)}) "
                f"SELECT {', '.join(selected)} FROM {old} GROUP BY {', '.join(ROUTE_KEY)}"
            )
        )
    op.drop_table(old)


def drop() -> None:
    for name in INDEXES:
        helpers.drop_index_if_present(name, TABLE)
    op.drop_table(TABLE)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
