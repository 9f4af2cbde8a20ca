"""The store file: home and profiles, connections and locks, every release's layout, schema.

Also migrations, the FTS and CJK indexes, triggers and views, snapshots and the damage
diagnosis. Imports only ``shapes``.
"""
