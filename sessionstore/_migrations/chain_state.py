"""What a migration run knows about the file before its first step (no imports: ``env.py``
records it from what the runtime's adoption step found, and the migrations read it).

A Hermes data step runs once, when Hermes's own open takes a file across its number: v16's
delegate backfill (revision 0019) tags sessions that *then* looked like orphaned subagent runs.
Our chain runs every later step of a Hermes file adopted at revision 0008, and set each
intermediate number on the way, so a step cannot tell from the version row whether the file
already crossed its number. ``env.py`` records the file's Hermes number before the chain (as
``sessionstore.schema.legacy.adopt`` found it) in ``Connection.info`` under this key; a data
step that Hermes already ran on the file skips its work. The key is removed when the chain
ends.
"""

HERMES_SCHEMA_BEFORE_CHAIN = "sessionstore.hermes_schema_before_chain"
