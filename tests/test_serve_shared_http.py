"""Two `calimon serve` processes on the embedded model sharing one PostgreSQL decision log (a
real server, tests/pg_server.py), as two replicas behind a load balancer: one session's 20
steps alternated between them answer every step with the scores a single server gives (within
1e-5), a scrape of either's ``/metrics`` counts the steps both answered, and when one is
SIGKILLed while it scores step 10 the session goes on at the other with the same scores,
every answer given before the kill comes back unchanged from the log, and the survivor's
``/metrics`` counts every step answer received, the killed server's included (tests/shared_sessions.py
runs it; ``benchmarks/serve/run_serve.py --parts replicas`` measures the same)."""

from __future__ import annotations

import json

import pytest
from pg_server import postgres_server
from serve_server import write_policy
from shared_sessions import largest_dp, pair_run

pytestmark = [pytest.mark.postgres, pytest.mark.model]

STEPS, KILL_AT = 20, 10


def test_a_session_goes_on_at_either_server_and_past_a_killed_one(tmp_path):
    import psycopg

    policy, map_path = write_policy(tmp_path)
    with postgres_server() as pg:
        url = pg.create_schema("pair")
        run = pair_run(policy, map_path, url, tmp_path, steps=STEPS, kill_at=KILL_AT)
        with psycopg.connect(url) as conn:
            logged = conn.execute("SELECT session_id, step, request_id FROM session_steps "
                                  "ORDER BY session_id, step").fetchall()
            decisions = dict(conn.execute("SELECT request_id, response FROM decisions")
                             .fetchall())

    one, alternated, killed = run["one"], run["alternated"], run["killed"]
    assert [r["code"] for r in one + alternated + killed["rows"]] == [200] * 3 * STEPS
    assert [r["answer"]["step"] for r in alternated] == list(range(STEPS))
    assert {r["server"] for r in alternated} == {0, 1}
    assert largest_dp(alternated, one) <= 1e-5
    assert [r["answer"]["decision"] for r in alternated] == \
        [r["answer"]["decision"] for r in one]
    for scrape in run["scrapes"]:  # both servers' steps, from either one
        assert scrape["steps_counted"] == 2 * STEPS
        assert len(scrape["per_replica"]) == 2 and min(scrape["per_replica"]) > 0
    # every step answer received, the killed server's included, is counted by the survivor
    # (it counted 24 of 25 when a server wrote its counts every second)
    assert run["steps_counted_at_end"] == run["steps_received"]
    rows = killed["rows"]
    assert [r["answer"]["step"] for r in rows] == list(range(STEPS))
    assert largest_dp(rows, one) <= 1e-5
    if killed["in_flight"] == 200:  # answered before the kill landed: the same answer again
        assert killed["in_flight_answer"] == rows[KILL_AT]["answer"]
    assert killed["resent_unchanged"] == killed["answered_before_kill"] == KILL_AT
    for session in ("one", "alternated", "killed"):
        assert [s for sid, s, _ in logged if sid == session] == list(range(STEPS))
    for r in rows:  # every answer given is the log's (the HTTP answer adds null kv fields)
        logged_answer = json.loads(decisions[r["answer"]["request_id"]])
        assert logged_answer.pop("kv").items() <= r["answer"].pop("kv").items()
        assert logged_answer == r["answer"]
