"""Resources registered further on in the program that an earlier resource must already wait for."""

from __future__ import annotations

import asyncio

import pulumi


class Later:
    """A resource the program creates further on, which an earlier resource must wait for: `depends_on` takes
    an Output, and `output` resolves once `resolve` hands over the resource. Every Later must be resolved, or the
    resources waiting on it never register."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._future: asyncio.Future = asyncio.get_event_loop().create_future()
        self.output: pulumi.Output = pulumi.Output.from_input(self._future)

    def resolve(self, resource: pulumi.Resource) -> None:
        self._future.set_result(resource)

    @property
    def resolved(self) -> bool:
        return self._future.done()
