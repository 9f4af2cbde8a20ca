"""SessionDB's session methods: create, end, titles, lineage, working directory, model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from hermes_state.agent import workspace
from hermes_state.agent.handle import StoreHandle
from hermes_state.records import sessions as ses
from hermes_state.reports import usage
from hermes_state.shapes.rows import SessionRow
from hermes_state.store.errors import AmbiguousSessionIdError, SessionNotFoundError


class SessionMethods(StoreHandle):
    """SessionDB's session methods, each a delegation to its concern."""

    # --- sessions ------------------------------------------------------------------------------

    def create_session(
        self,
        session_id: str,
        source: str,
        *,
        model: str | None = None,
        model_config: Mapping[str, Any] | str | None = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        parent_session_id: str | None = None,
        started_at: float | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
        display_name: str | None = None,
        origin_json: str | None = None,
        cwd: str | None = None,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
        profile_name: str | None = None,
        transport_profile: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
    ) -> str:
        """Create a session, or fill in what an earlier writer left empty; return its id."""
        return ses.create_session(
            self.store,
            session_id,
            source,
            started_at=started_at,
            model=model,
            model_config=model_config,
            system_prompt=system_prompt,
            user_id=user_id,
            parent_session_id=parent_session_id,
            session_key=session_key,
            chat_id=chat_id,
            chat_type=chat_type,
            thread_id=thread_id,
            display_name=display_name,
            origin_json=origin_json,
            cwd=cwd,
            git_branch=git_branch,
            git_repo_root=git_repo_root,
            profile_name=profile_name,
            transport_profile=transport_profile,
            billing_provider=billing_provider,
            billing_base_url=billing_base_url,
            billing_mode=billing_mode,
        )

    def ensure_session(
        self,
        session_id: str,
        source: str = "unknown",
        model: str | None = None,
        *,
        user_id: str | None = None,
        parent_session_id: str | None = None,
        system_prompt: str | None = None,
    ) -> str:
        """Make sure a session row exists (an upsert that only fills what is still empty)."""
        return ses.ensure_session(
            self.store,
            session_id,
            source,
            model,
            user_id=user_id,
            parent_session_id=parent_session_id,
            system_prompt=system_prompt,
        )

    def end_session(
        self, session_id: str, end_reason: str, *, ended_at: float | None = None
    ) -> None:
        """End a session (the first end wins)."""
        ses.end_session(self.store, session_id, end_reason, ended_at=ended_at)

    def reopen_session(self, session_id: str) -> None:
        """Clear a session's end."""
        ses.reopen_session(self.store, session_id)

    def get_session(self, session_id: str) -> SessionRow | None:
        """Return one session's columns, or None."""
        return cast("SessionRow | None", ses.get_session(self.store, session_id))

    def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        """Return the id equal to, or uniquely prefixed by, the text (None when ambiguous)."""
        try:
            return ses.resolve_session_id(self.store, session_id_or_prefix)
        except AmbiguousSessionIdError:
            return None

    def find_session(self, ref: str) -> str:
        """Resolve an id, unique prefix or title, or raise SessionNotFoundError."""
        return ses.find_session(self.store, ref)

    def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Set (or with None/empty clear) a session's title; False when there is no such session.

        Raises TitleInUseError (a ValueError) when another conversation holds the title.
        """
        try:
            ses.set_session_title(self.store, session_id, title)
        except SessionNotFoundError:
            return False
        return True

    def set_auto_title_if_empty(self, session_id: str, title: str) -> bool:
        """Set a generated title only while the session has none; tell whether it was set."""
        return ses.set_auto_title_if_empty(self.store, session_id, title)

    def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin or unpin a session; return False when no session has that id."""
        return ses.set_session_pinned(self.store, session_id, pinned)

    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archive or unarchive a session; return False when no session has that id."""
        return ses.set_session_archived(self.store, session_id, archived)

    def get_session_title(self, session_id: str) -> str | None:
        """Return a session's title (None when untitled or unknown)."""
        try:
            return ses.get_session_title(self.store, session_id)
        except SessionNotFoundError:
            return None

    def get_session_by_title(self, title: str) -> SessionRow | None:
        """Return the session whose title is exactly this one, or None."""
        return cast("SessionRow | None", ses.get_session_by_title(self.store, title))

    def resolve_session_by_title(self, title: str) -> str | None:
        """Return the newest session of a title's lineage (for resuming, not for destroying)."""
        return ses.resolve_session_by_title(self.store, title)

    def get_next_title_in_lineage(self, base_title: str) -> str:
        """Return the next numbered title of a lineage ("T #2", …)."""
        return ses.get_next_title_in_lineage(self.store, base_title)

    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> None:
        """Store a session's assembled system prompt."""
        ses.update_system_prompt(self.store, session_id, system_prompt)

    def get_lineage(self, session_id: str) -> list[SessionRow]:
        """Return a session's ancestors, root first, ending with the session."""
        return cast("list[SessionRow]", ses.get_lineage(self.store, session_id))

    def get_descendants(self, session_id: str) -> list[SessionRow]:
        """Return every session descending from this one."""
        return cast("list[SessionRow]", ses.get_descendants(self.store, session_id))

    def update_session_cwd(
        self,
        session_id: str,
        cwd: str,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
        replace_git_meta: bool = False,
    ) -> int | None:
        """Record a session's working directory (branch and repo root only when known)."""
        return workspace.update_session_cwd(
            self.store, session_id, cwd, git_branch, git_repo_root, replace_git_meta
        )

    def distinct_session_cwds(self, include_archived: bool = False) -> list[dict[str, Any]]:
        """Return every directory sessions worked in, with how many and when last."""
        return workspace.distinct_session_cwds(self.store, include_archived)

    def backfill_repo_roots(self, cwd_to_root: dict[str, str]) -> None:
        """Fill the repository root of sessions in each directory that have none."""
        workspace.backfill_repo_roots(self.store, cwd_to_root)

    def update_session_model(
        self,
        session_id: str,
        model: str,
        provider: str | None = None,
        *,
        base_url: str | None = None,
        api_mode: str | None = None,
    ) -> None:
        """Set a session's model after a mid-session switch (and its route, with provider)."""
        self.flush_token_counts()  # a queued pre-switch report must not land after the switch
        usage.update_session_model(
            self.store, session_id, model, provider, base_url=base_url, api_mode=api_mode
        )

    def update_session_billing_route(
        self, session_id: str, *, provider: str, base_url: str, billing_mode: str | None = None
    ) -> None:
        """Set a session's billing route after a provider switch."""
        self.flush_token_counts()
        usage.update_session_billing_route(
            self.store, session_id, provider=provider, base_url=base_url, billing_mode=billing_mode
        )

    def update_session_meta(
        self, session_id: str, model_config_json: str, model: str | None = None
    ) -> None:
        """Replace a session's model_config (and its model, when given)."""
        ses.update_session_meta(self.store, session_id, model_config_json, model)

    def promote_to_session_reset(self, session_id: str, reason: str = "session_reset") -> bool:
        """End a live (or accidentally ended) session as a deliberate reset."""
        return ses.promote_to_session_reset(self.store, session_id, reason)
