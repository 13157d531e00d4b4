"""Run recursive tree passes without Python recursion.

A pass over the AST is written as generator functions that ``yield`` the generator of a
sub-pass and receive its result, ``x = yield self.value(child)``, instead of calling it.
`run` drives them with an explicit stack, so the Python stack stays a few frames deep
however deep the tree is. Every pass over a filter (printing, compiling to closures,
compiling to Spark) uses it, which is what lets the depth limit be about the language and
not about Python's recursion limit.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

__all__ = ["Step", "run"]

T = TypeVar("T")

Step = Generator["Step[Any]", Any, T]
"""A pass step: yields sub-steps, receives their results, returns its own."""


def run(step: Step[T]) -> T:
    """Drive `step` (and every sub-step it yields) to completion; return its result."""
    stack: list[Step[Any]] = [step]
    value: Any = None
    while True:
        try:
            child = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            if not stack:
                result: T = done.value
                return result
            value = done.value
            continue
        stack.append(child)
        value = None
