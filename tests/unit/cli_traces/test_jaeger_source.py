from __future__ import annotations

import json
import socket

import pytest
from cli_traces_builders import T0, TASK, TRACE

from tracedray.cli.tracestore.jaeger import search_params
from tracedray.cli.tracestore.sources import JaegerSource, SpanQuery
from tracedray.cli.tracestore.story import WORKER_DIED, TaskStory, task_story
from tracedray.exceptions import RaySystemError
from tracedray.telemetry import attributes as attr


def dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more


def test_search_sends_snake_and_camel_params_and_rebuilds_the_story(jaeger):
    jaeger.serve("/api/v3/services", "api_v3_services.json")
    jaeger.serve("/api/v3/traces?tracedray-driver", "api_v3_find_traces_task.json")
    source = JaegerSource(jaeger.url, clock_ns=lambda: T0 + 3600 * 10**9)
    batch = source.find_spans(SpanQuery(task_id=TASK, start_min_ns=T0 - 60 * 10**9))
    assert [path for path, _ in jaeger.requests] == ["/api/v3/services"] + ["/api/v3/traces"] * 3
    _, params = jaeger.requests[1]
    for snake, camel in [("service_name", "serviceName"), ("start_time_min", "startTimeMin"),
                         ("start_time_max", "startTimeMax"), ("search_depth", "searchDepth")]:
        assert params[f"query.{snake}"] == params[f"query.{camel}"], snake
    assert params["query.serviceName"] == ["tracedray-driver"]
    assert params["query.startTimeMin"] == ["2025-12-31T23:59:00.000000Z"]
    assert params["query.startTimeMax"] == ["2026-01-01T01:00:00.000000Z"]
    assert params["query.searchDepth"] == ["100"] and params["query.num_traces"] == ["100"]
    assert json.loads(params["query.attributes"][0]) == {attr.TASK_ID: TASK}
    # Two services answered 404 ("No traces found"): that is no spans, not an error.
    assert source.statistics().client.not_found == 2
    story = task_story(batch.spans, [], TASK, jaeger_url=jaeger.url)
    assert isinstance(story, TaskStory)
    assert [a.outcome for a in story.attempts] == [WORKER_DIED, "returned"]
    assert story.jaeger_link == f"{jaeger.url}/trace/{TRACE}"


def test_get_trace_by_id_and_404_is_empty(jaeger):
    jaeger.serve("/api/v3/traces/00000000000000000000000000000001",
                 "api_v3_get_trace_minimal.json")
    source = JaegerSource(jaeger.url, service_names=["x"])
    (span,) = source.find_spans(SpanQuery(trace_id="00000000000000000000000000000001")).spans
    assert (span.name, span.span_id, span.is_error, span.start_ns) == (
        "foobar", "0000000000000002", True, 0)
    assert source.find_spans(SpanQuery(trace_id="ff" * 16)).spans == ()
    assert source.find_spans(SpanQuery(task_id="nothing")).spans == ()  # search → 404
    assert jaeger.requests[-1][1]["query.serviceName"] == ["x"]


def test_server_errors_and_dead_urls_raise_a_clear_error(jaeger):
    jaeger.routes["/api/v3/traces"] = (
        400, b'{"error":{"httpCode":400,"message":"malformed query.startTimeMin"}}')
    with pytest.raises(RaySystemError, match="answered 400 .*malformed query.startTimeMin"):
        JaegerSource(jaeger.url, service_names=["s"]).find_spans(SpanQuery(task_id=TASK))
    url = dead_url()
    with pytest.raises(RaySystemError, match=f"Jaeger at {url} did not answer"):
        JaegerSource(url, timeout_s=2).find_spans(SpanQuery(task_id=TASK))


def test_search_params_without_attributes_omit_the_filter():
    params = dict(search_params(service="s", start_min_ns=0, start_max_ns=10**9))
    assert "query.attributes" not in params
    assert params["query.start_time_max"] == "1970-01-01T00:00:01.000000Z"
