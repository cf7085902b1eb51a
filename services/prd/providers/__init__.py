"""Providers: who does a story's work. The contract is :mod:`.base`; :mod:`.registry` resolves a
provider by key. Each provider lives in its own module and is imported only by the registry."""
