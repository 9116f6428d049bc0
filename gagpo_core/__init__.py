"""The bottom layer every other package of gagpo may import: the entry-point plugin registry
(``plugins``), atomic file writes (``atomic``) and folder locks that die with their holder (``locks``).
It imports none of them: ``estimators``, ``environments`` and ``gagpo_cli`` point down to it, never the
other way.
"""
