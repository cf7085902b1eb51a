"""The dependency graph of a workflow's steps, and the plan that runs it (pure).

A workflow's steps form a directed acyclic graph: an edge ``a -> b`` says
``b`` runs only after ``a`` finished. :func:`find_cycle` refuses graphs that
are not acyclic (the loader turns that into a diagnostic naming the steps);
:class:`StepPlan` is the scheduler's state machine, no I/O and no clock:

* :meth:`StepPlan.start` gives the steps that depend on nothing;
* :meth:`StepPlan.finish` records one step's outcome and gives the steps that
  became ready (every dependency finished and *passed*) and those that will
  never run (a dependency failed, directly or through another step).

A step "passes" when it succeeded or failed with ``continue_on_error``; the
caller decides that and says so in ``passed``. Ready steps come in definition
order, so a chain (each step depending on the one before) runs exactly as a
linear list does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["StepPlan", "find_cycle", "topological_order"]


def find_cycle(deps: Mapping[str, Sequence[str]]) -> list[str] | None:
    """One dependency cycle as a path (``[a, b, a]``), or ``None`` when the graph is acyclic.

    ``deps`` maps each step to the steps it depends on; a name that is not a
    key is ignored (unknown dependencies are the caller's check).
    """
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(deps, white)
    for start in deps:
        if colour[start] != white:
            continue
        # Iterative depth-first search; ``trail`` is the grey path from ``start``.
        trail: list[str] = [start]
        iters = [iter(deps[start])]
        colour[start] = grey
        while iters:
            child = next(iters[-1], None)
            if child is None:
                colour[trail.pop()] = black
                iters.pop()
                continue
            state = colour.get(child)
            if state is None or state == black:
                continue
            if state == grey:
                return [*trail[trail.index(child) :], child]
            colour[child] = grey
            trail.append(child)
            iters.append(iter(deps[child]))
    return None


def topological_order(deps: Mapping[str, Sequence[str]]) -> list[str]:
    """Every step after all it depends on, ties in the mapping's order; ``ValueError`` on a cycle."""
    cycle = find_cycle(deps)
    if cycle is not None:
        raise ValueError(f"dependency cycle: {' -> '.join(cycle)}")
    plan = StepPlan(deps)
    order: list[str] = []
    ready = plan.start()
    while ready:
        step = ready.pop(0)
        order.append(step)
        ready = plan.sort([*ready, *plan.finish(step, passed=True)[0]])
    return order


class StepPlan:
    """Which steps may start, given the ones that finished. One instance per run."""

    def __init__(self, deps: Mapping[str, Sequence[str]]) -> None:
        unknown = sorted({d for ds in deps.values() for d in ds} - set(deps))
        if unknown:
            raise ValueError(f"unknown dependencies: {', '.join(unknown)}")
        cycle = find_cycle(deps)
        if cycle is not None:
            raise ValueError(f"dependency cycle: {' -> '.join(cycle)}")
        self._index = {step: i for i, step in enumerate(deps)}
        self._waiting: dict[str, set[str]] = {step: set(ds) for step, ds in deps.items()}
        self._dependents: dict[str, list[str]] = {step: [] for step in deps}
        for step, ds in deps.items():
            for dep in dict.fromkeys(ds):
                self._dependents[dep].append(step)
        self.passed: set[str] = set()
        self.failed: set[str] = set()
        #: Steps that will not run, each with the failed step that stopped it.
        self.skipped: dict[str, str] = {}
        self._started: set[str] = set()

    def sort(self, steps: Sequence[str]) -> list[str]:
        """``steps`` in definition order."""
        return sorted(steps, key=self._index.__getitem__)

    def start(self) -> list[str]:
        """The steps that depend on nothing."""
        ready = [s for s, waiting in self._waiting.items() if not waiting]
        self._started.update(ready)
        return ready

    def finish(self, step: str, *, passed: bool) -> tuple[list[str], list[str]]:
        """Record ``step``'s outcome: (steps now ready, steps now skipped), each in definition order."""
        if step not in self._started or step in self.passed or step in self.failed:
            raise ValueError(f"step {step!r} was not running")
        (self.passed if passed else self.failed).add(step)
        ready: list[str] = []
        skipped: list[str] = []
        if passed:
            for child in self._dependents[step]:
                waiting = self._waiting[child]
                waiting.discard(step)
                if not waiting and child not in self.skipped:
                    self._started.add(child)
                    ready.append(child)
        else:
            stack = list(self._dependents[step])
            while stack:
                child = stack.pop()
                if child in self.skipped:
                    continue
                self.skipped[child] = step
                skipped.append(child)
                stack.extend(self._dependents[child])
        return self.sort(ready), self.sort(skipped)

    @property
    def finished(self) -> bool:
        """Every step passed, failed or was skipped."""
        return len(self.passed) + len(self.failed) + len(self.skipped) == len(self._index)
