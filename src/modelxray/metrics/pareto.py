"""Pareto frontier of configurations trading size against quality (both minimised)."""

from __future__ import annotations


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the non-dominated points: no other point is <= on both axes and < on one."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any((x2 <= x and y2 <= y) and (x2 < x or y2 < y) for j, (x2, y2) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i])
