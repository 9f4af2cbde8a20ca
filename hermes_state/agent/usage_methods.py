"""SessionDB's usage methods: tokens and cost per call, per session and per model."""

from __future__ import annotations

from typing import cast

from hermes_state.agent.handle import StoreHandle
from hermes_state.reports import stats, usage
from hermes_state.shapes.rows import ModelUsage, SessionRow, SourceCount, StoreStats, UsageTotals


class UsageMethods(StoreHandle):
    """SessionDB's usage methods, each a delegation to its concern."""

    # --- usage ---------------------------------------------------------------------------------

    def record_usage(
        self,
        session_id: str,
        model: str,
        *,
        task: str = "",
        billing_provider: str = "",
        billing_base_url: str = "",
        billing_mode: str = "",
        estimated_cost_usd: float = 0.0,
        actual_cost_usd: float | None = None,
        at: float | None = None,
        api_call_count: int = 1,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> None:
        """Add one API call's tokens and cost to a session and its per-model usage row."""
        usage.record_usage(
            self.store,
            session_id,
            model,
            task=task,
            billing_provider=billing_provider,
            billing_base_url=billing_base_url,
            billing_mode=billing_mode,
            estimated_cost_usd=estimated_cost_usd,
            actual_cost_usd=actual_cost_usd,
            at=at,
            api_call_count=api_call_count,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens,
        )

    def update_token_counts(
        self,
        session_id: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
        cost_status: str | None = None,
        cost_source: str | None = None,
        pricing_version: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
        api_call_count: int = 0,
        absolute: bool = False,
        source: str | None = None,
        task: str = "",
    ) -> None:
        """Add one call's tokens and cost (or, with absolute=True, set the session's totals)."""
        usage.update_token_counts(
            self.store,
            session_id,
            input_tokens,
            output_tokens,
            model,
            cache_read_tokens,
            cache_write_tokens,
            reasoning_tokens,
            estimated_cost_usd,
            actual_cost_usd,
            cost_status,
            cost_source,
            pricing_version,
            billing_provider,
            billing_base_url,
            billing_mode,
            api_call_count,
            absolute,
            source,
            task,
        )

    def record_auxiliary_usage(
        self,
        session_id: str,
        task: str,
        *,
        model: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        api_call_count: int = 1,
    ) -> None:
        """Record a side task's usage (title generation, compression, …) under its task name."""
        usage.record_auxiliary_usage(
            self.store,
            session_id,
            task,
            model=model,
            billing_provider=billing_provider,
            billing_base_url=billing_base_url,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens,
            estimated_cost_usd=estimated_cost_usd,
            api_call_count=api_call_count,
        )

    def usage_totals(
        self, *, min_message_count: int = 1, include_archived: bool = False
    ) -> UsageTotals:
        """Return tokens and spend over the store's root ses."""
        self.flush_token_counts()
        totals = usage.usage_totals(
            self.store, min_message_count=min_message_count, include_archived=include_archived
        )
        return {"tokens": int(totals["tokens"]), "cost_usd": float(totals["cost_usd"])}

    def usage_by_model(self) -> list[ModelUsage]:
        """Return tokens and cost per model."""
        return cast("list[ModelUsage]", stats.usage_by_model(self.store))

    def top_sessions_by_tokens(self, n: int = 10) -> list[SessionRow]:
        """Return the sessions that used the most tokens."""
        return cast("list[SessionRow]", stats.top_sessions_by_tokens(self.store, n))

    def counts_by_source(self) -> list[SourceCount]:
        """Return session and message counts per source."""
        return cast("list[SourceCount]", stats.counts_by_source(self.store))

    def store_stats(self) -> StoreStats:
        """Return file sizes, page counts and row counts."""
        return cast("StoreStats", stats.store_stats(self.store))
