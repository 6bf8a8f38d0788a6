"""Hypothesis strategies for dependency graphs (``task id -> ids it depends on``)."""

from __future__ import annotations

import itertools

from hypothesis import strategies as st


@st.composite
def acyclic_graphs(draw: st.DrawFn, max_tasks: int = 30) -> dict[str, list[str]]:
    """A random DAG whose definition order is shuffled, so it is not already topological."""
    n = draw(st.integers(1, max_tasks))
    rank = [f"t{i}" for i in range(n)]
    deps: dict[str, list[str]] = {}
    for i, task in enumerate(rank):
        # Depending only on lower ranks keeps the graph acyclic.
        chosen = draw(st.lists(st.integers(0, i - 1), max_size=min(i, 4), unique=True)) if i else []
        deps[task] = [rank[j] for j in chosen]
    order = draw(st.permutations(rank))
    return {t: deps[t] for t in order}


@st.composite
def cyclic_graphs(draw: st.DrawFn, max_tasks: int = 30) -> dict[str, list[str]]:
    """A random graph (any edge directions, no self-loops) with at least one cycle of length >= 2."""
    n = draw(st.integers(2, max_tasks))
    ids = [f"t{i}" for i in range(n)]
    deps: dict[str, list[str]] = {t: [] for t in ids}
    ring = draw(st.lists(st.sampled_from(ids), min_size=2, max_size=min(n, 6), unique=True))
    for a, b in zip(ring, [*ring[1:], ring[0]], strict=True):
        deps[a].append(b)
    extra = draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)), max_size=2 * n))
    for a, b in extra:
        if a != b and b not in deps[a]:
            deps[a].append(b)
    return deps


def is_cycle_in(cycle: list[str], deps: dict[str, list[str]]) -> bool:
    """``[a, b, ..., a]`` where each task depends on the next and no task repeats before the end."""
    if len(cycle) < 2 or cycle[0] != cycle[-1] or len(set(cycle[:-1])) != len(cycle) - 1:
        return False
    return all(b in deps.get(a, []) for a, b in itertools.pairwise(cycle))
