"""Hermes 0.18.0's Telegram DM topic tables at their own version 1 (no profile, no cascade),
as a file of that release holds them: the DDL and the meta row, for tests to add to a file."""

TELEGRAM_TOPICS_V1 = """
            CREATE TABLE telegram_dm_topic_mode (
                chat_id TEXT PRIMARY KEY, user_id TEXT NOT NULL,
                enabled INTEGER NOT NULL DEFAULT 1, activated_at REAL NOT NULL,
                updated_at REAL NOT NULL, has_topics_enabled INTEGER,
                allows_users_to_create_topics INTEGER, capability_checked_at REAL,
                intro_message_id TEXT, pinned_message_id TEXT
            );
            CREATE TABLE telegram_dm_topic_bindings (
                chat_id TEXT NOT NULL, thread_id TEXT NOT NULL, user_id TEXT NOT NULL,
                session_key TEXT NOT NULL, session_id TEXT NOT NULL REFERENCES sessions(id),
                managed_mode TEXT NOT NULL DEFAULT 'auto', linked_at REAL NOT NULL,
                updated_at REAL NOT NULL, PRIMARY KEY (chat_id, thread_id)
            );
            CREATE UNIQUE INDEX idx_telegram_dm_topic_bindings_session
                ON telegram_dm_topic_bindings(session_id);
            CREATE INDEX idx_telegram_dm_topic_bindings_user
                ON telegram_dm_topic_bindings(user_id, chat_id);
            INSERT INTO state_meta (key, value) VALUES ('telegram_dm_topic_schema_version', '1');
"""

TELEGRAM_TOPICS_V2 = TELEGRAM_TOPICS_V1.replace(
    "REFERENCES sessions(id)", "REFERENCES sessions(id) ON DELETE CASCADE"
).replace("'telegram_dm_topic_schema_version', '1'", "'telegram_dm_topic_schema_version', '2'")
"""0.19.0 ... iot 0.20.x's version 2: v1 with the binding's ``ON DELETE CASCADE`` (the shape
``test_the_telegram_topic_tables_at_each_of_their_versions`` reads from iot 0.20.4's file)."""
