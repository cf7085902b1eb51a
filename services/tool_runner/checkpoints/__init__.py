"""Checkpoints of a project's files, one per conversation turn before its first writing call (issue 30).

:mod:`.recorder` is what the tool runner uses (the pipeline's hook and the three endpoints);
:mod:`.store` the shadow repository of one project; :mod:`.tree` the work tree as git objects
and back (host side, never through a link); :mod:`.listing` git's own listing of the work tree,
run in the OS sandbox; :mod:`.settings` the user's ``checkpoints`` settings; :mod:`.usage`
where they live and their disk use (no re-exports here: ``doctor`` imports :mod:`.usage` alone). See
docs/checkpoints.md and decision 0334.
"""
