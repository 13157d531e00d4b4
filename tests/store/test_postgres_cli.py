"""The command line on a PostgreSQL store (docs/postgres.md, "The rest of telemq"):
`telemq links forget` drops a removed link's session from the database named by
`[store] kind = "postgres"`, and is refused while a broker holds the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from telemq.cli.main import main
from telemq.store import DeliveryRecord, SessionRecord, StoredMessage, WriteBatch
from telemq.store.postgres import PostgresStore
from testsupport.postgres import PostgresServer


def postgres_config(path: Path, server: PostgresServer, dsn: str) -> Path:
    """A broker configuration whose store is the database `dsn` names (password in a file)."""
    secret = path.parent / "pg.password"
    secret.write_text(server.password + "\n", encoding="utf-8")
    plain = dsn.replace(f" password={server.password}", "")
    path.write_text(
        f'[store]\nkind = "postgres"\ndsn = "{plain}"\npassword_file = "{secret}"\n',
        encoding="utf-8",
    )
    return path


def test_links_forget_on_a_postgres_store(
    postgres_server: PostgresServer,
    postgres_dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = PostgresStore(postgres_dsn)
    batch = WriteBatch()
    batch.put_session(SessionRecord("$link/B"))
    for mid in (1, 2, 3):  # owed to B
        batch.put_message(StoredMessage(mid, "t", b"m", 1, client_id="p", ts_us=mid))
        batch.put_delivery(DeliveryRecord(mid, "$link/B", mid, 1))
    batch.put_session(SessionRecord("kept"))
    store.commit(batch)
    config = str(postgres_config(tmp_path / "telemq.toml", postgres_server, postgres_dsn))
    try:
        # While a broker holds the store, it is that broker's.
        assert main(["links", "forget", "B", "-c", config]) == 2
        assert "in use by another broker" in capsys.readouterr().err
    finally:
        store.close()
    assert main(["links", "forget", "B", "-c", config]) == 0
    assert "3 messages owed to it" in capsys.readouterr().out
    assert main(["links", "forget", "B", "-c", config]) == 2
    assert "no session for link 'B'" in capsys.readouterr().err
    store = PostgresStore(postgres_dsn)
    try:
        state = store.load()
    finally:
        store.close()
    assert [record.client_id for record in state.sessions] == ["kept"]
    assert state.deliveries == []
