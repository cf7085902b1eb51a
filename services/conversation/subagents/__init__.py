"""Sub-agents: the ``task`` tool hands a self-contained job to a child conversation.

``templates`` (the agent files), ``core`` (the pure rules), ``slots`` (the per-project
limit across replicas), ``runner`` (one call, run in the parent's actor). See
``docs/subagents.md``.
"""
