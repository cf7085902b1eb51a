"""The PRD service (seed 004, Daedalus): a product requirements document worked story by story.

Layers, as the seed draws them:

- core (pure, no I/O): :mod:`.model` (the PRD schema), :mod:`.ops` (story selection and
  transitions), :mod:`.states` (loop states), :mod:`.retry` (the retry policy);
- core with I/O: :mod:`.files` (``.daedalus/prds/<name>/…``), :mod:`.config`
  (``daedalus/config.toml`` and the ``prd`` settings key), :mod:`.quality` (check commands in the
  sandbox), :mod:`.git` (cleanliness, commits, branch and worktree), :mod:`.loop` (the loop
  manager), :mod:`.eventlog` (ordered fan-out to ``events.jsonl`` and the bus);
- adapters: :mod:`.providers` (the provider contract in ``providers.base``; each provider in its
  own module, resolved by key through ``providers.registry``; core never imports one).
"""
