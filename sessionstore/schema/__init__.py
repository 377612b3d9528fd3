"""The schema: the ORM models (for DDL and autogenerate only), Alembic run from code
(:mod:`~sessionstore.schema.migrate`), and the adoption of Hermes files sessionstore did not
write (:mod:`~sessionstore.schema.legacy`: recognise and stamp;
:mod:`~sessionstore.schema.adoption`: the first-adoption backup). The revisions themselves are
frozen in ``sessionstore/_migrations``.
"""
