"""The pool and transaction helpers against the real Postgres: commit on return, roll back on raise."""

from __future__ import annotations

import pytest

from gfs.services.platform.postgres import open_pool, transaction

pytestmark = pytest.mark.integration


class _Boom(Exception):
    pass


async def test_transaction_commits_on_return_and_rolls_back_on_raise(
    database_url: str, scratch_schema: str
) -> None:
    async with open_pool(database_url, server_settings={"search_path": scratch_schema}) as pool:
        await pool.execute("CREATE TABLE t (id int PRIMARY KEY)")
        async with transaction(pool) as connection:
            await connection.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(_Boom):
            async with transaction(pool) as connection:
                await connection.execute("INSERT INTO t VALUES (2)")
                raise _Boom
        assert [row["id"] for row in await pool.fetch("SELECT id FROM t ORDER BY id")] == [1]
    assert pool.is_closing()
