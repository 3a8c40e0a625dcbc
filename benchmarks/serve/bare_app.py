"""The framework alone, for ``run_serve.py --parts external``: a FastAPI route on uvicorn (as
`calimon serve` runs them; its access log on, or off with ``off``, as the benchmark's calimon
servers run) that validates a `/v1/score` body with the same
request model and answers a small JSON, with no decision, no log and no middleware. What the
benchmark's clients get from it is the most one process of this framework answers here.

    python benchmarks/serve/bare_app.py PORT [on|off]
"""

from __future__ import annotations

import sys

import uvicorn
from fastapi import FastAPI

from calimon.serve.schemas import ScoreRequest

app = FastAPI()


@app.post("/v1/score")
async def score(body: ScoreRequest) -> dict:
    """Echo the request id and score."""
    return {"request_id": body.request_id, "score": body.score, "decision": "pass"}


@app.get("/healthz")
async def healthz() -> dict:
    """Up."""
    return {"status": "ok"}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="info",
                access_log=sys.argv[2:3] != ["off"])
