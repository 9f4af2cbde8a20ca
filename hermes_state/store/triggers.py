"""The agent's triggers of schema 31: the message_uid identity trigger and the four display
triggers Hermes Agent 0.22 adds on its first open, in the release's text, byte for byte."""

from __future__ import annotations

# Schema 31's identity trigger and the four display triggers Hermes Agent 0.22 adds on its first
# open. The release compares their stored SQL with its own text on every open and recreates any
# that differ (under the write lock, bumping the schema cookie), so the text below is the
# release's, byte for byte: it is part of the store's format, like a column list.
UID_TRIGGER = "messages_message_uid_insert"
UID_TRIGGER_DDL = (
    "CREATE TRIGGER messages_message_uid_insert\n"
    "AFTER INSERT ON messages WHEN new.message_uid IS NULL\n"
    "BEGIN\n"
    "    -- Every row carries a message_uid, whoever wrote it: a build that predates the column"
    " binds NULL, so\n"
    "    -- the store mints one on its behalf (the current build always binds a uid; this never"
    " fires for it).\n"
    "    -- The note lives inside the body: a comment before DROP/CREATE would defeat the"
    " settled-trigger skip.\n"
    "    UPDATE messages SET message_uid = lower(hex(randomblob(16))) WHERE id = new.id;\n"
    "END"
)
DISPLAY_TRIGGER_DDL: dict[str, str] = {
    "messages_display_order_insert": (
        "CREATE TRIGGER messages_display_order_insert\n"
        "AFTER INSERT ON messages WHEN new.display_order IS NULL\n"
        "BEGIN\n"
        "    UPDATE messages SET display_order = COALESCE((\n"
        "        SELECT display_order FROM messages\n"
        "        WHERE session_id = new.session_id AND id <> new.id\n"
        "          AND (active = 1 OR compacted = 1)\n"
        "          AND display_identity = new.display_identity AND display_order IS NOT NULL\n"
        "        ORDER BY display_order LIMIT 1\n"
        "    ), new.id) WHERE id = new.id;\n"
        "END"
    ),
    "messages_display_visibility_update": (
        "CREATE TRIGGER messages_display_visibility_update\n"
        "AFTER UPDATE OF active, compacted ON messages\n"
        "WHEN (new.active = 1 OR new.compacted = 1) <> (old.active = 1 OR old.compacted = 1)\n"
        "BEGIN\n"
        "    UPDATE messages SET display_order = MIN(new.id, COALESCE((\n"
        "        SELECT display_order FROM messages\n"
        "        WHERE session_id = new.session_id AND id <> new.id\n"
        "          AND (active = 1 OR compacted = 1)\n"
        "          AND display_identity = new.display_identity AND display_order IS NOT NULL\n"
        "        ORDER BY display_order LIMIT 1\n"
        "    ), new.id)) WHERE id = new.id\n"
        "      AND (new.active = 1 OR new.compacted = 1);\n"
        "    UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id ="
        " new.id)\n"
        "    WHERE session_id = new.session_id AND id <> new.id AND (active = 1 OR compacted = 1)\n"
        "      AND display_identity = new.display_identity\n"
        "      AND (new.active = 1 OR new.compacted = 1);\n"
        "    UPDATE messages SET display_order = (\n"
        "        SELECT MIN(peer.id) FROM messages AS peer\n"
        "        WHERE peer.session_id = old.session_id AND (peer.active = 1 OR peer.compacted ="
        " 1)\n"
        "          AND peer.display_identity = old.display_identity\n"
        "    ) WHERE session_id = old.session_id AND (active = 1 OR compacted = 1)\n"
        "      AND display_identity = old.display_identity\n"
        "      AND NOT (new.active = 1 OR new.compacted = 1);\n"
        "END"
    ),
    "messages_display_identity_update": (
        "CREATE TRIGGER messages_display_identity_update\n"
        "AFTER UPDATE OF role, content, timestamp, tool_call_id, tool_calls, tool_name,\n"
        "                display_kind ON messages\n"
        "WHEN new.role IS NOT old.role\n"
        "  OR new.content IS NOT old.content\n"
        "  OR new.timestamp IS NOT old.timestamp\n"
        "  OR new.tool_call_id IS NOT old.tool_call_id\n"
        "  OR new.tool_calls IS NOT old.tool_calls\n"
        "  OR new.tool_name IS NOT old.tool_name\n"
        "  OR new.display_kind IS NOT old.display_kind\n"
        "BEGIN\n"
        "    UPDATE messages SET display_identity = NULL, display_order = NULL\n"
        "    WHERE id = new.id OR (\n"
        "        session_id = old.session_id AND display_identity = old.display_identity\n"
        "        AND (active = 1 OR compacted = 1)\n"
        "    );\n"
        "END"
    ),
    "messages_display_identity_delete": (
        "CREATE TRIGGER messages_display_identity_delete\n"
        "AFTER DELETE ON messages WHEN old.active = 1 OR old.compacted = 1\n"
        "BEGIN\n"
        "    UPDATE messages SET display_order = (\n"
        "        SELECT MIN(peer.id) FROM messages AS peer\n"
        "        WHERE peer.session_id = old.session_id AND (peer.active = 1 OR peer.compacted ="
        " 1)\n"
        "          AND peer.display_identity = old.display_identity\n"
        "    ) WHERE session_id = old.session_id AND (active = 1 OR compacted = 1)\n"
        "      AND display_identity = old.display_identity;\n"
        "END"
    ),
}
# Every trigger of the agent's whose text the agent checks, by name.
CHECKED_TRIGGER_DDL: dict[str, str] = {UID_TRIGGER: UID_TRIGGER_DDL, **DISPLAY_TRIGGER_DDL}
UID_BACKFILL_KEY = "message_uid_backfill"  # upstream marks a finished backfill with '1'
