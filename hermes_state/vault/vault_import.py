"""What an import into a profile must know of its vault: the sessions it holds, the ids it used.

A session in a vault store is present in the profile: importing it again skips it ("in vault
2025") instead of making a second, live copy; and no imported message gets an id any vault
store has used (see :mod:`hermes_state.transfer.import_ids`).
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_state.store.connection import Store
from hermes_state.store.sql import chunks, marks
from hermes_state.transfer.import_ids import OtherStores, store_high_id
from hermes_state.vault.vault import open_vault, vault_paths


def other_stores(live: Store) -> OtherStores:
    """Return the vault stores of the live store's profile, as an import needs them."""
    home = live.path.parent
    high = 0
    for _year, path in vault_paths(home):
        store = open_vault(path, read_only=True, waiting=live.waiting)
        try:
            high = max(high, store_high_id(store.conn))
        finally:
            store.close()

    def where(ids: Sequence[str]) -> dict[str, str]:
        """Return which of the ids a vault store holds: id -> "vault YEAR" (newest year)."""
        found: dict[str, str] = {}
        # Listed on each call: a `vault move` running beside the import may add a year.
        for year, path in reversed(vault_paths(home)):
            store = open_vault(path, read_only=True, waiting=live.waiting)
            try:
                for batch in chunks([i for i in dict.fromkeys(ids) if i not in found]):
                    sql = f"SELECT id FROM sessions WHERE id IN ({marks(len(batch))})"
                    for (sid,) in store.conn.execute(sql, batch):
                        found[sid] = f"vault {year}"
            finally:
                store.close()
        return found

    return OtherStores(high, where)
