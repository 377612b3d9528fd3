"""pytest-alembic's built-in checks, wired explicitly, on SQLite and PostgreSQL.

- single head: the chain never forks;
- upgrade: base -> head runs on an empty database;
- model/DDL match: autogenerate finds no difference between the models and the migrated
  schema (full-text objects hidden by env.py's include_name);
- up/down consistency: every revision downgrades cleanly back to base.
"""

from __future__ import annotations

from pytest_alembic.tests import (
    test_model_definitions_match_ddl,
    test_single_head_revision,
    test_up_down_consistency,
    test_upgrade,
)

__all__ = [
    "test_model_definitions_match_ddl",
    "test_single_head_revision",
    "test_up_down_consistency",
    "test_upgrade",
]


def test_the_packaged_head_constant_names_the_newest_script() -> None:
    from sessionstore.schema import migrate

    assert migrate.script_directory().get_current_head() == migrate.HEAD_REVISION
