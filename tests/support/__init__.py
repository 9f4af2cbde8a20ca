"""Test support: real stores built (stores, legacy_layout, upstream30), damaged (damage), and
child processes that import this checkout (children)."""
