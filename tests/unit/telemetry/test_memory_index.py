"""The object store's events kept in the trace index (telemetry/memory_index.py): the
writer takes them out of the lines it indexes, once each; a replaced file's events go
with it; an index made before the table is not trusted for them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tracedray.telemetry import index_reader
from tracedray.telemetry import memory_index as mi
from tracedray.telemetry import trace_index as ti

NODE = "ab" * 14


def _span(name: str, span_id: str, **attrs: Any) -> dict[str, Any]:
    def value(v: Any) -> dict[str, Any]:
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}

    return {"traceId": "0f" * 16, "spanId": span_id, "name": name,
            "startTimeUnixNano": "100", "endTimeUnixNano": "200",
            "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()]}


def _line(*spans: dict[str, Any]) -> str:
    resource = {"attributes": [{"key": "tracedray.node.id", "value": {"stringValue": NODE}}]}
    return json.dumps({"resourceSpans": [{"resource": resource,
                                          "scopeSpans": [{"spans": list(spans)}]}]})


SEAL = _span("object.seal", "01" * 8, **{"tracedray.object.id": "aa", "tracedray.object.size": 5,
                                         "tracedray.store.used": 5})
INLINE_PUT = _span("object.put", "02" * 8, **{"tracedray.object.id": "bb",
                                              "tracedray.object.location": "inline"})
GET = _span("object.get", "03" * 8, **{"tracedray.object.id": "aa"})
FREE = _span("object.free", "04" * 8, **{"tracedray.object.id": "aa"})


def _rows(root: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(root / ti.INDEX_NAME) as conn:
        return conn.execute("SELECT name, object_id, node_id FROM store_events "
                            "ORDER BY span_id").fetchall()


def test_the_writer_keeps_each_store_event_once(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "logs").mkdir()
    path = tmp_path / "traces" / "driver-1.jsonl"
    path.write_text(_line(SEAL, INLINE_PUT, GET) + "\n" + _line(GET) + "\n"
                    + _line(SEAL) + "\n")  # a span converted twice counts once
    writer = ti.IndexWriter(tmp_path)
    assert not writer.update().error
    assert _rows(tmp_path) == [("object.seal", "aa", NODE)]  # no inline put, no get
    reader, _ = index_reader.open_index(tmp_path, up_to_date=False)
    assert reader is not None
    with path.open("a") as out:  # not indexed yet: a tail line
        out.write(_line(FREE) + "\n")
    events, tails = reader.store_events() or ([], [])
    reader.close()
    assert [e.name for e in events] == ["object.seal"] and len(tails) == 1
    assert [e.name for e in mi.events_of_line(tails[0])[0]] == ["object.free"]

    path.write_text(_line(FREE) + "\n")  # replaced by a shorter file: indexed anew
    assert not writer.update().error
    writer.close()
    assert _rows(tmp_path) == [("object.free", "aa", NODE)]


def test_an_index_older_than_the_table_is_not_trusted(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "driver-1.jsonl").write_text(_line(SEAL) + "\n")
    writer = ti.IndexWriter(tmp_path)
    writer.update()
    writer.close()
    with sqlite3.connect(tmp_path / ti.INDEX_NAME) as conn:  # as an older tracedray left it
        conn.execute("DROP TABLE store_events")
        conn.execute("DELETE FROM meta WHERE name='store_events'")
    writer = ti.IndexWriter(tmp_path)  # a newer writer opens it: lines indexed, no events
    writer.update()
    writer.close()
    reader, _ = index_reader.open_index(tmp_path, up_to_date=False)
    assert reader is not None
    assert reader.store_events() is None
    reader.close()
    events, warning = mi.events_of_line(b'{"name":"object.seal", broken')
    assert events == [] and "corrupt" in warning


def test_a_line_of_inline_puts_is_not_parsed_and_a_shm_put_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    shm_put = _span("object.put", "05" * 8, **{"tracedray.object.id": "cc",
                                               "tracedray.object.location": "shm"})
    both = _line(INLINE_PUT, GET, shm_put).encode()
    assert [(e.name, e.object_id) for e in mi.events_of_line(both)[0]] == [("object.put", "cc")]
    # Compact, as tracedray writes it, and spaced, as a tool may rewrite it.
    spaced = json.dumps(json.loads(both), indent=1).replace("\n", "").encode()
    assert [e.object_id for e in mi.events_of_line(spaced)[0]] == ["cc"]
    monkeypatch.setattr(mi, "json", None)  # a parse would fail: a warning, not ""
    for line in (_line(INLINE_PUT, GET), _line(INLINE_PUT, GET).replace(" ", "")):
        assert mi.events_of_line(line.encode()) == ([], "")
