"""A test seam for counting the statements a store sends (the database is real)."""


class CountingPool:
    """The real pool, counting the statements the store sends through it."""

    def __init__(self, pool) -> None:
        self.pool = pool
        self.statements = 0

    def __getattr__(self, name):
        method = getattr(self.pool, name)
        if name in ("fetch", "fetchrow", "fetchval", "execute"):
            async def counted(*args):
                self.statements += 1
                return await method(*args)
            return counted
        return method
