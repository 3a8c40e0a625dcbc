"""The review pages, rendered on the server as plain HTML (`calimon.review.api` serves
them): the sign-in form, the queue (one page holds the next transcripts to label, one shown at a
time), one item, and the status of recertification and drift. The script and the style are
files of their own (`calimon.review.assets`), so the pages run under a
Content-Security-Policy that allows no inline code: transcripts are untrusted text, escaped, and
could not run even if they were not.

Evidence segments are marked at their character offsets in the response and listed strongest
first in the evidence panel (`calimon.review.evidence`); a chat transcript is shown
message by message (the parts `calimon.data.trajectory.render_parts` recorded), each segment
cut to the messages it falls in.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from calimon.review.evidence import marked, panel_html, split_evidence
from calimon.review.labels import Label, TrafficRow

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
e = html.escape


def document(title: str, body: str, *, reviewer: str | None = None, refresh: int | None = None,
             script: bool = False) -> str:
    """A whole page: the top bar (when signed in), ``body``, the style and, with ``script``,
    the review script."""
    nav = ""
    if reviewer is not None:
        nav = (f'<header class="top"><strong>calimon review</strong>'
               f'<a href="/review">queue</a><a href="/review/status">status</a>'
               f'<span class="who">signed in as <b id="reviewer">{e(reviewer)}</b></span>'
               f'<form method="post" action="/review/logout" id="sign-out"><button '
               f'type="submit">sign out</button></form></header>'
               f'<p class="notice" id="sign-out-note" role="alert" hidden></p>')
    # the script's notice of labels other reviewers left waiting in this browser's outbox
    notice = '<p class="notice" id="others" role="status"></p>'
    meta = f'<meta http-equiv="refresh" content="{int(refresh)}">' if refresh else ""
    js = '<script src="/review/static/review.js" defer></script>' if script else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">{meta}'
            f'<title>{e(title)}</title><link rel="icon" href="/review/static/icon.svg">'
            f'<link rel="stylesheet" href="/review/static/review.css">'
            f'{js}</head><body>{nav}{notice}{body}</body></html>')


def login_page(error: str | None = None, next_path: str = "/review") -> str:
    """The sign-in form: a reviewer's key, sent once, answered with a cookie; then the page
    ``next_path`` (a local path, checked by the caller)."""
    err = f'<p class="error" role="alert">{e(error)}</p>' if error else ""
    return document("calimon review: sign in", (
        '<main class="login"><h1>calimon review</h1><form method="post" action="/review/login">'
        '<label for="key">Your reviewer key</label>'
        '<input id="key" name="key" type="password" autocomplete="current-password" required '
        f'autofocus><input type="hidden" name="next" id="next" value="{e(next_path)}">'
        '<button type="submit">Sign in</button></form>' + err + '</main>'),
        script=True)


def not_found_page(reviewer: str, what: str) -> str:
    """The page of a review address that shows nothing (served with a 404)."""
    return document("calimon review: not found", (
        f'<main class="status missing"><h1>Not found</h1><p>{e(what)}</p><p>The queue has the '
        f'transcripts waiting for a label: <a href="/review">back to the queue</a>.</p>'
        f'</main>'), reviewer=reviewer)


def _part_name(rec: dict[str, Any]) -> str:
    if rec.get("part") == "tool_call":
        return f"#{rec.get('index')} tool call: {rec.get('tool')}"
    if rec.get("part") == "tool_result":
        return f"#{rec.get('index')} tool result: {rec.get('tool')}"
    return f"#{rec.get('index')} {rec.get('role')}"


def transcript_html(row: TrafficRow) -> str:
    """The task, the evidence panel (segments strongest first, with precision and a legend)
    and the response (message by message when there are parts) with the segments marked
    (`calimon.review.evidence`)."""
    text = row.response_text or ""
    segs, toks, lost = split_evidence(row.evidence_list(), text)
    parts = [p for p in row.parts_list()
             if isinstance(p.get("start"), int) and isinstance(p.get("end"), int)]
    if parts:
        body = "".join(
            f'<div class="part part-{e(str(p.get("role")))}"><div class="part-head">'
            f'{e(_part_name(p))}</div><pre>{marked(text, segs, toks, p["start"], p["end"])}'
            f'</pre></div>' for p in parts)
    else:
        body = f"<pre>{marked(text, segs, toks)}</pre>"

    def where(at: int) -> str:
        return next((_part_name(p) for p in parts
                     if p.get("header_start", p["start"]) <= at < p["end"]), "")

    note = (f'<p class="lost">Evidence not found in the text: '
            f'{"; ".join(e(q) for q in lost)}</p>' if lost else "")
    n = len(segs)
    return (f'<div class="request"><h3>Task</h3><pre>{e(row.request_text or "")}</pre></div>'
            f'{panel_html(segs, where)}'
            f'<div class="response"><h3>Response <small>{n} evidence segment'
            f'{"" if n == 1 else "s"} marked</small></h3>{body}{note}</div>')


def _num(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def clock_time(t: float) -> str:
    """A time of today as the pages show it (UTC)."""
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M UTC")


DECISION = {"human_review": "review", "auto_pass": "pass", "auto_block": "block"}


def item_section(row: TrafficRow, index: int, total: int, reason: str,
                 mine: Label | None = None, hidden: bool = False, seen: int = 0) -> str:
    """One item: its header (decision, scores, why it is asked), the label buttons and note,
    and the transcript; ``seen``: the item's label count as it is shown (its labels say they
    were given knowing that many: `calimon.review.conflicts`)."""
    where = (f"session {e(row.session_id or '')} step {row.step}" if row.kind == "step"
             else "transcript")
    done = (f'your label: {e(mine.label)}' if mine is not None else "")
    if mine is not None and mine.over_claim:
        done += f" (given while {e(mine.over_claim)} held this item)"
    return (
        f'<section class="item" id="item-{row.item_id}" data-item="{row.item_id}" '
        f'data-hash="{row.transcript_hash}" data-index="{index}" data-seen="{int(seen)}"'
        f'{" hidden" if hidden else ""}>'
        f'<div class="item-head"><span class="pos">{index + 1} / {total}</span>'
        f'<span class="why">{e(reason)}</span>'
        f'<span class="decision d-{DECISION.get(row.action, "x")}">'
        f'{DECISION.get(row.action, e(row.action))}</span>'
        f'<span>p_cal {_num(row.p_cal)} · p_raw {_num(row.p_raw)}</span>'
        f'{"<span class=audit>audit</span>" if row.audit else ""}'
        f'<span>{where}</span><time>{_when(row.received_at)}</time></div>'
        f'<div class="label-bar">'
        f'<button type="button" data-label="misbehavior" class="b-mis"><kbd>1</kbd> '
        f'misbehavior</button>'
        f'<button type="button" data-label="benign" class="b-ben"><kbd>2</kbd> benign</button>'
        f'<button type="button" data-label="unsure" class="b-uns"><kbd>3</kbd> unsure</button>'
        f'<label class="second-box"><input type="checkbox" class="second"> <kbd>s</kbd> ask a '
        f'second reviewer</label>'
        f'<textarea class="note" maxlength="2000" rows="1" placeholder="note (n to write, Esc '
        f'to leave)"></textarea>'
        f'<p class="state" aria-live="polite">{done}</p></div>'
        f'{transcript_html(row)}</section>')


def cert_text(c: dict[str, Any]) -> str:
    """One certificate in a few words (the summary bar; the script writes the same)."""
    what = c["rate"].upper()
    bound = "—" if c["upper"] is None else f"{c['upper']:.3f}"
    if c["alpha"] is None:
        return f"{what}: no target set"
    need = (f" · {c['labels_needed']} more labels" if c.get("labels_needed") else "")
    return f"{what} ≤ {c['alpha']:g}: {c['state']} · bound {bound}{need}"


def summary_html(status: dict[str, Any]) -> str:
    """The summary bar: each certificate's state, bound and labels still needed."""
    certs = "".join(f'<p class="cert cert-{e(c["state"].split()[0])}" data-rate="{c["rate"]}">'
                    f'{e(cert_text(c))}</p>' for c in status["certificates"])
    return (f'<div id="summary" data-labels="{status["labels"]}">{certs}'
            f'<p class="counts">{status["labels"]} labels · {status["decisions"]} decisions'
            f'</p></div>')


def queue_page(reviewer: str, entries: Sequence[tuple[TrafficRow, str]], status: dict[str, Any],
               mine: dict[str, Label], *, seen: dict[str, int] | None = None,
               lease_until: float | None = None) -> str:
    """The queue: the next items to label (one shown at a time) and the summary bar;
    ``seen``: each item's label count; ``lease_until``: when the page's items stop being the
    reviewer's alone (renewed while they work)."""
    seen = seen or {}
    n = len(entries)
    rows = "".join(
        f'<li data-index="{i}" data-item="{r.item_id}"><a href="/review/items/{r.item_id}">'
        f'<span class="why">{e(why)}</span> <span class="decision d-'
        f'{DECISION.get(r.action, "x")}">{DECISION.get(r.action, e(r.action))}</span> '
        f'<span class="p">{_num(r.score)}</span><span class="mark"></span></a></li>'
        for i, (r, why) in enumerate(entries))
    items = "".join(item_section(r, i, n, why, mine.get(r.item_id), hidden=i > 0,
                                 seen=seen.get(r.item_id, 0))
                    for i, (r, why) in enumerate(entries))
    if not entries:
        items = ('<section class="empty"><h2>Nothing to label now</h2><p>No transcript of the '
                 'review band, the audit slice or the plan waits for you. The status page says '
                 'what the labels so far certify.</p></section>')
    else:
        items = _page_end(n) + items
    side = (f'<aside class="side">{summary_html(status)}<ol id="queue">{rows}</ol>'
            f'<p class="keys"><kbd>j</kbd>/<kbd>k</kbd> next / previous · <kbd>1</kbd> '
            f'<kbd>2</kbd> <kbd>3</kbd> label · <kbd>s</kbd> second reviewer · <kbd>n</kbd> '
            f'note</p><p><a href="/review" id="next-page">next page of the queue</a></p>'
            f'<p class="outbox" id="outbox"></p>{_lease_html(lease_until)}</aside>')
    return document("calimon review: queue", f'<main class="review">{side}<div class="items">'
                    f'{items}</div></main>', reviewer=reviewer, script=True)


def _page_end(n: int) -> str:
    """The way on to the next page of the queue: the script shows it above the page's last
    item once that is labelled or passed with ``j``."""
    return (f'<section class="page-end" id="page-end" hidden><h2>End of this page</h2>'
            f'<p id="page-end-count">{n} item{"" if n == 1 else "s"} on this page.</p>'
            f'<p><a href="/review" id="next-page-end">Next page of the queue</a> '
            f'(<kbd>Enter</kbd>): the items waiting for a label now, or word that none '
            f'is.</p></section>')


def _lease_html(until: float | None) -> str:
    if until is None:
        return ""
    return (f'<p class="lease" id="lease">These items are yours alone until '
            f'{clock_time(until)}: the other reviewers get the next ones (renewed while you '
            f'work).</p>')


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in r) + "</tr>"
                   for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _drift_html(d: dict[str, Any]) -> str:
    if d.get("state") != "checked":
        why = d.get("why") or d.get("state")
        return f'<p class="drift drift-{e(str(d.get("state")))}">Drift watch: {e(str(why))}</p>'
    verdicts = "".join(f'<li class="{"breaks" if v["breaks"] else "ok"}">{e(v["line"])}</li>'
                       for v in d["verdicts"]) or "<li>the policy states no FAR target</li>"
    when = _when(d["checked_at"]) if d.get("checked_at") else ""
    return (f'<p class="drift {"shifted" if d["shifted"] else "steady"}">{e(d["line"])} '
            f'<small>(checked {when}, {d["window"]} live transcripts; check {d["check"]} '
            f'judged at p &lt;= {d["alpha_k"]:.2g}, {e(d["rule"])})</small></p>'
            f'<ul class="verdicts">{verdicts}</ul>')


def _shadow_html(sh: dict[str, Any] | None) -> str:
    """The shadow candidate beside the live policy: its certificate on live labels and the
    paired MR comparison (`calimon.review.promotion`)."""
    if sh is None:
        return ""
    certs = _table(("rate", "target", "estimate", "lower", "upper", "state"),
                   [(c["rate"].upper(), "—" if c["alpha"] is None else f"≤ {c['alpha']:g}",
                     _num(c["estimate"]), _num(c["lower"]), _num(c["upper"]), c["state"])
                    for c in sh["certificates"]], "certs shadow")
    mr = sh["mr"]
    paired = ("no misbehaving transcript in the shared labelled sample yet" if
              mr["misbehaving"] == 0 else
              f"MR live {_num(mr['live_mr'])}, candidate {_num(mr['candidate_mr'])} on "
              f"{mr['misbehaving']} misbehaving transcripts; difference "
              f"{_num(mr['difference'])}, {mr['level']:.0%} interval [{_num(mr['lower'])}, "
              f"{_num(mr['upper'])}] (paired, exact)")
    verdict = ("promotable: both checks pass" if sh["promotable"] else
               "not promotable: " + "; ".join(sh["reasons"]))
    return (f'<h2>Shadow candidate: {e(sh["policy"])} (sha256 {e(sh["policy_hash"][:12])})</h2>'
            f'<p>{sh["decisions"]} decisions made in shadow (logged, never answered), '
            f'{sh["labelled"]} of them labelled.</p>{certs}<p id="shadow-mr">{e(paired)}</p>'
            f'<p id="shadow-verdict">{e(verdict)}</p>')


def _over_claims_html(n: int) -> str:
    """The labels given while another reviewer held the item (claims are not locks)."""
    return (f' (<span id="over-claims">{n} given while another reviewer held the item</span>)'
            if n else "")


def status_page(status: dict[str, Any], reviewer: str) -> str:
    """Recertification on live traffic and the drift watch (refreshes itself)."""
    holds = status["holds"]
    head = ("THE CERTIFICATE IS BROKEN" if status["broken"] else
            "the certificate holds on live traffic" if holds else
            "not certified on live traffic yet" if holds is not None else
            "the policy states no target to recertify")
    certs = _table(("rate", "target", "estimate", "lower", "upper", "state", "labels needed"),
                   [(c["rate"].upper(), "—" if c["alpha"] is None else f"≤ {c['alpha']:g}",
                     _num(c["estimate"]), _num(c["lower"]), _num(c["upper"]), c["state"],
                     "—" if c["labels_needed"] is None else c["labels_needed"])
                    for c in status["certificates"]], "certs")
    lines = "".join(f"<li>{e(c['line'])}</li>" for c in status["certificates"])
    strata = _table(("action", "decided", "in the sample", "benign", "misbehaving",
                     "unresolved", "waiting for a gap"),
                    [(a, s["decided"], s["sampled"], s["benign"], s["misbehaving"],
                      s["unresolved"], s["waiting"]) for a, s in status["strata"].items()],
                    "strata")
    mark = {True: "✓", False: "✗", None: "?"}
    assumptions = "".join(f'<li class="a-{str(a["holds"]).lower()}"><b>{mark[a["holds"]]} '
                          f'{e(a["name"])}</b>: {e(a["detail"])}</li>'
                          for a in status["assumptions"])
    body = (f'<main class="status"><h1 id="verdict" class="{"broken" if status["broken"] else ""}'
            f'">Policy {e(status["policy"])}: {e(head)}</h1>'
            f'<p>{status["decisions"]} decisions, {status["labels"]} labels'
            f'{_over_claims_html(status.get("labels_over_claims") or 0)}; '
            f'{status["retain"]:.0%} of automatic decisions kept for review. Bounds at '
            f'1 − delta on the decided traffic, reviewers assumed right.</p>{certs}'
            f'<ul class="lines">{lines}</ul><h2>The sample</h2>{strata}'
            f'<h2>Assumptions</h2><ul class="assumptions">{assumptions}</ul>'
            f'{_shadow_html(status.get("shadow"))}'
            f'<h2>Drift</h2>{_drift_html(status["drift"])}'
            f'<h2>Export</h2><p><a href="/v1/review/export">labelled traffic as samples '
            f'JSONL</a> (the uniform sample; <a href="/v1/review/export?sample=all">every '
            f'label</a>)</p></main>')
    return document("calimon review: status", body, reviewer=reviewer, refresh=15,
                    script=True)
