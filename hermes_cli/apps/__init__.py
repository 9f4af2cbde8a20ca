"""The full-screen apps, sessions browse and watch (Textual, imported only when they run)."""
