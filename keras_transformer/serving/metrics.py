"""The engine's counters in Prometheus' text exposition format."""

METRICS = (
    # name, type, help, value of (engine, responses)
    ("kt_requests_total", "counter", "Requests submitted.",
     lambda e, r: e.counters["requests"]),
    ("kt_prompt_tokens_total", "counter", "Prompt tokens read into slots.",
     lambda e, r: e.counters["prompt_tokens"]),
    ("kt_generated_tokens_total", "counter", "Tokens generated.",
     lambda e, r: e.counters["tokens"]),
    ("kt_decode_steps_total", "counter", "Decode steps run (every busy slot "
     "advances one token a step).", lambda e, r: e.counters["steps"]),
    ("kt_queue_length", "gauge", "Requests waiting for a slot.",
     lambda e, r: e.queued),
    ("kt_slots_busy", "gauge", "Slots holding a request.",
     lambda e, r: e.busy_slots),
    ("kt_slots", "gauge", "Slots (requests decoded at once).",
     lambda e, r: e.slots),
    ("kt_time_to_first_token_seconds_sum", "counter", "Seconds from a "
     "request's arrival to its first token, summed.",
     lambda e, r: e.counters["first_token_seconds"]),
    ("kt_time_to_first_token_seconds_count", "counter", "Requests that "
     "received a first token.", lambda e, r: e.counters["first_tokens"]),
)  # fmt: skip


def text(engine, responses):
    """Each metric's HELP, TYPE and value; then finished requests by
    reason and HTTP responses by status."""
    lines = []
    for name, kind, help_text, value in METRICS:
        lines += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} {kind}",
            f"{name} {_number(value(engine, responses))}",
        ]
    lines += [
        "# HELP kt_requests_finished_total Requests ended, by finish reason.",
        "# TYPE kt_requests_finished_total counter",
    ]
    for reason, count in sorted(engine.finished.items()):
        lines.append(f'kt_requests_finished_total{{reason="{reason}"}} {count}')
    lines += [
        "# HELP kt_http_responses_total Responses, by HTTP status.",
        "# TYPE kt_http_responses_total counter",
    ]
    for status, count in sorted(responses.items()):
        lines.append(f'kt_http_responses_total{{status="{status}"}} {count}')
    return "\n".join(lines) + "\n"


def _number(value):
    return repr(float(value)) if isinstance(value, float) else str(int(value))
