"""The per-period table rotator: prebuilds, sets up, dials down, exports and drops
the ``<prefix>-<period label>`` tables. See ``docs/rotation.md``.

Modules: :mod:`.lifecycle` (pure rules of the clock), :mod:`.specs` (what each
resource should look like), :mod:`.tables`, :mod:`.stream_mappings` and
:mod:`.cloudwatch` (data access), :mod:`.logic` (the run), :mod:`.request` (the
event), :mod:`.summary` (the report), :mod:`.handler` (the entry point).
"""
