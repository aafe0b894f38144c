"""
The approval inbox as a Starlette application: the paused runs, each run's page, and the decision forms.

Every page needs a signed-in reviewer; every form carries the session's CSRF
token and is refused without it; every response forbids inline script
(``Content-Security-Policy``), framing and sniffing. Run pages and the inbox
poll a small JSON stamp read from the store and reload when it changes, so
they follow a run as it moves, whoever moves it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_fsm import Agent
from agent_fsm.engine import answered_by, blocked_call, reply_strands
from agent_fsm.store import AlreadyDecided, BadCursor, ClaimTaken, DamagedRun, RunNotFound, StoreError
from agent_fsm.store.protocol import RunStore
from agent_fsm.web.auth import Reviewers, Session, Sessions
from agent_fsm.web.decisions import FormRefused, answer_fields, apply, read_form
from agent_fsm.web.listing import back_to, listed_row, listing, page_stamp, read_query, shown_claim
from agent_fsm.web.pages import render_page, run_context
from agent_fsm.web.timeline import pretty_json

__all__ = ["APP_POLICY", "KEPT_OPEN", "SecurityHeaders", "inbox_app"]

APP_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""The inbox's Content-Security-Policy: scripts and styles only from its own files, never inline."""

KEPT_OPEN = 4
"""Stores the inbox keeps open between requests for its pages (one per request served at once)."""

COOKIE = "agent_fsm_session"
_HEADERS = [
    (b"content-security-policy", APP_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),  # "no-referrer" would make browsers send "Origin: null"
    (b"cache-control", b"no-store"),
]
_NOTICES = {
    "approve": "You approved the call.",
    "edit": "You approved the call with your edited arguments.",
    "reject": "You rejected the call; the model was told your reason.",
    "answer": "You answered the call; your answer is its result.",
    "reply": "You decided every call of the reply.",
    "cancel": "You cancelled the run; the call was not run.",
}


class SecurityHeaders:
    """
    ASGI middleware adding the security headers to every response, a failure's included.

    Starlette answers an unhandled exception outside every middleware given to
    it; so a failure is answered here (a bare 500 with the headers) before it
    goes on up to be logged. An application with other headers or another
    answer to a failure (the serving API's JSON) overrides ``headers`` and ``failed``.
    """

    headers = _HEADERS

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), *self.headers]
            await send(message)

        try:
            await self.app(scope, receive, with_headers)
        except Exception:
            if scope["type"] != "http" or started:
                raise
            await self.failed(scope, receive, with_headers)
            raise

    async def failed(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a request the application failed on (nothing was sent yet)."""
        body = b"The inbox failed on this request; it was logged. Reload, or ask whoever runs the inbox."
        await send(
            {
                "type": "http.response.start",
                "status": 500,
                "headers": [(b"content-type", b"text/plain; charset=utf-8")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def inbox_app(
    open_store: Callable[[], RunStore],
    agent: Agent,
    *,
    reviewers: Reviewers,
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    wait: float = 10.0,
    poll_seconds: float = 1.5,
    secure_cookies: bool = False,
) -> Starlette:
    """
    The inbox over the store ``open_store()`` opens, deciding runs as ``agent``.

    Pages read through up to :data:`KEPT_OPEN` stores kept open between
    requests (a store that raised is closed, and the next request opens a
    new one); each decision opens its own.

    ``agent`` judges each decided call afresh and continues the run, as
    :func:`agent_fsm.store.approve` does (``agent-fsm inbox --world`` names
    it). A decision continues the run in a worker thread: the reviewer's request
    waits up to ``wait`` seconds for it to rest, after which the run page
    follows it live. Up to four decisions run at once, sharing ``agent``, so
    its model, gate and handlers are called from several threads. ``allowed_hosts`` are the Host headers served (others
    get 400: no DNS rebinding); ``secure_cookies`` for an inbox behind HTTPS.

    Raises:
        TypeError: ``agent`` is not an :class:`~agent_fsm.Agent` (found now, not at the first decision).
    """
    if not isinstance(agent, Agent):
        raise TypeError(f"'agent' must be an Agent (got {agent!r} that is a {type(agent).__name__}).")
    sessions = Sessions()
    workers = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="agent-fsm-decision")

    def session_of(request: Request) -> Session | None:
        return sessions.get(request.cookies.get(COOKIE))

    def page(request: Request, template: str, session: Session, status: int = 200, **context: Any) -> HTMLResponse:
        html = render_page(
            template, reviewer=session.reviewer, csrf=session.csrf, poll_ms=int(poll_seconds * 1000), **context
        )
        response = HTMLResponse(html, status_code=status)
        if request.cookies.get(COOKIE) != session.sid:
            response.set_cookie(COOKIE, session.sid, httponly=True, samesite="strict", secure=secure_cookies)
        return response

    def error(
        request: Request, session: Session, status: int, title: str, message: str, run_id: str | None = None
    ) -> HTMLResponse:
        return page(request, "error.html", session, status, title=title, message=message, run_id=run_id)

    # Stores kept open between requests for reading and claiming (opening one is a connection and a schema
    # check: on PostgreSQL about as long as a page's whole listing). A decision opens its own (see apply).
    readers: queue.SimpleQueue[RunStore] = queue.SimpleQueue()

    def with_store(read: Callable[[RunStore], Any]) -> Any:
        try:
            store = readers.get_nowait()
        except queue.Empty:
            store = open_store()
        try:
            result = read(store)
        except BaseException:
            store.close()  # whatever failed, a store that saw it is not trusted again: the next request opens one
            raise
        if readers.qsize() < KEPT_OPEN:
            readers.put(store)
        else:
            store.close()
        return result

    def signed_in(
        handler: Callable[[Request, Session], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = session_of(request)
            if session is None or session.reviewer is None:
                if request.url.path.endswith(".json"):
                    return JSONResponse({"error": "sign in first"}, status_code=401)
                return RedirectResponse("/login", status_code=303)
            return await handler(request, session)

        return endpoint

    async def checked_form(request: Request, session: Session) -> Any:
        try:
            form = await request.form()
        except HTTPException as exc:  # a field larger than the form parser takes (1 MiB)
            raise FormRefused(422, "The form cannot be read", f"{exc.detail} Nothing was decided.") from None
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            raise FormRefused(403, "Refused", "the form was sent from another site")
        token = form.get("csrf")
        if not session.csrf_matches(token if isinstance(token, str) else None):
            raise FormRefused(403, "The form has expired", "its security token is not this session's; reload")
        return form

    async def login_page(request: Request) -> Response:
        session = session_of(request) or sessions.new()
        return page(request, "login.html", session, failed=False)

    async def login(request: Request) -> Response:
        session = session_of(request) or sessions.new()
        try:
            form = await checked_form(request, session)
        except FormRefused as refused:
            return error(request, session, refused.status, refused.title, refused.message)
        name, token = form.get("reviewer"), form.get("token")
        who = reviewers.check(name, token) if isinstance(name, str) and isinstance(token, str) else None
        if who is None:
            await asyncio.sleep(0.5)  # a guess costs time
            return page(request, "login.html", session, status=401, failed=True)
        fresh = sessions.sign_in(session, who)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, fresh.sid, httponly=True, samesite="strict", secure=secure_cookies)
        return response

    async def logout(request: Request, session: Session) -> Response:
        try:
            await checked_form(request, session)
        except FormRefused as refused:
            return error(request, session, refused.status, refused.title, refused.message)
        sessions.end(session)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    def unreadable(request: Request, session: Session, exc: StoreError, run_id: str | None = None) -> Response:
        if isinstance(exc, DamagedRun):
            return error(request, session, 500, "This run cannot be read", str(exc), run_id=run_id)
        return error(request, session, 503, "The store failed", f"{exc}. Reload to try again.", run_id=run_id)

    async def inbox(request: Request, session: Session) -> Response:
        try:
            wanted = read_query(request.query_params, session.reviewer)
            page_of = await run_in_threadpool(with_store, lambda store: listing(store, wanted))
        except BadCursor as exc:
            return error(request, session, 400, "This page of the inbox cannot be found", f"{exc}.")
        except ValueError as exc:
            return error(request, session, 400, "The filter cannot be read", str(exc))
        except StoreError as exc:
            return unreadable(request, session, exc)
        now = time.time()
        waiting = [listed_row(s, now) for s in page_of]
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return page(
            request,
            "inbox.html",
            session,
            waiting=waiting,
            total=page_of.total,
            filters=wanted.shown,
            next_url=wanted.url_after(page_of.next) if page_of.next is not None else None,
            first_url=wanted.url_after(None) if wanted.cursor is not None else None,
            here=here,
            live_url="/inbox.json" + (f"?{request.url.query}" if request.url.query else ""),
            stamp=page_stamp(page_of),
        )

    async def inbox_stamp(request: Request, session: Session) -> Response:
        try:
            wanted = read_query(request.query_params, session.reviewer)
            page_of = await run_in_threadpool(with_store, lambda store: listing(store, wanted))
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except StoreError as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        return JSONResponse({"stamp": page_stamp(page_of), "paused": page_of.total})

    async def claim(request: Request, session: Session) -> Response:
        run_id = request.path_params["run_id"]
        reviewer = session.reviewer
        assert reviewer is not None
        try:
            form = await checked_form(request, session)
            pause_id, back = form.get("pause_id"), form.get("back")
            if not isinstance(pause_id, str) or not pause_id:
                raise FormRefused(422, "No pause named", "the form does not say which pause it claims; reload")
            if request.url.path.endswith("/release"):
                await run_in_threadpool(with_store, lambda store: store.release(run_id, reviewer))
            else:
                await run_in_threadpool(with_store, lambda store: store.claim(run_id, reviewer, pause_id=pause_id))
        except FormRefused as refused:
            return error(request, session, refused.status, refused.title, refused.message, run_id=run_id)
        except ClaimTaken as exc:
            return error(request, session, 409, "Claimed by someone else", f"{exc}.", run_id=run_id)
        except AlreadyDecided as exc:
            return error(request, session, 409, "This pause is no longer open", f"{exc}.", run_id=run_id)
        except RunNotFound as exc:
            return error(request, session, 404, "No such run", str(exc))
        except StoreError as exc:
            return unreadable(request, session, exc, run_id=run_id)
        return RedirectResponse(back_to(back, run_id), status_code=303)

    def _read_run(run_id: str) -> Any:
        def read(store: RunStore) -> Any:
            stored = store.load(run_id)
            lineage = store.forked_from(run_id), store.forks(run_id), store.claim_of(run_id)
            return stored, store.effects(run_id), store.history(run_id), lineage

        return with_store(read)

    async def run_page(request: Request, session: Session) -> Response:
        run_id = request.path_params["run_id"]
        try:
            stored, effects, history, (forked_from, forks, claimed) = await run_in_threadpool(_read_run, run_id)
        except RunNotFound as exc:
            return error(request, session, 404, "No such run", str(exc))
        except StoreError as exc:
            return unreadable(request, session, exc, run_id=run_id)
        context = await run_in_threadpool(
            run_context, stored.state, run_id=run_id, effects=effects, decisions=history, agent=agent
        )
        blocked = stored.summary.blocked if stored.status == "paused" else None
        blocked_path: tuple[str, ...] = ()
        state = stored.state
        fields = None
        asked = False  # the call is open and asked mid-call: an approval with no answer is the person's cancel
        review: list[Any] = []
        if blocked is not None and state.machine_state == "AwaitingApproval" and state.pending:
            # a nested pause: the person decides the innermost call (an edit edits it), under the calls leading to it
            blocked, blocked_path = blocked_call(state)
            person = answered_by(agent.tools, state)[1]  # the deciding agent's declaration, never the saved state
            fields = None if person is None else answer_fields(person.result)
            asked = person is not None and person.approvable
            review = await run_in_threadpool(_reply_review, state)  # a nested run's calls addressed n1/c1, ...
        notice = _NOTICES.get(request.query_params.get("decided", ""))
        return page(
            request,
            "run.html",
            session,
            summary=stored.summary,
            blocked=blocked,
            blocked_path=blocked_path,
            blocked_arguments=pretty_json(blocked.arguments) if blocked is not None else "",
            answer_fields=fields,
            asked=asked,
            review=review if len(review) > 1 else [],
            review_json=pretty_json({call.call_id: {"approve": True} for call in review}),
            notice=notice,
            moving=request.query_params.get("moving") == "1",
            live_url=f"/runs/{quote(run_id, safe='')}/status.json",
            stamp=str(stored.summary.version),
            forked_from=forked_from,
            forks=forks,
            claim=shown_claim(claimed),
            here=f"/runs/{quote(run_id, safe='')}",
            **context,
        )

    def _reply_review(state: Any) -> list[Any]:
        """
        The calls of the paused reply a person decides together (none when the gate cannot say now, or when a
        call whose server may ask comes before a later one: see :func:`agent_fsm.engine.reply_strands`).
        """
        try:
            return [] if reply_strands(agent, state) is not None else agent.reply_review(state)
        except Exception:  # an async gate, or one that fails: the calls are decided one by one
            return []

    async def run_stamp(request: Request, session: Session) -> Response:
        run_id = request.path_params["run_id"]
        try:
            stored = await run_in_threadpool(with_store, lambda store: store.load(run_id))
        except RunNotFound:
            return JSONResponse({"error": "no such run"}, status_code=404)
        except StoreError as exc:
            return JSONResponse({"error": str(exc)}, status_code=500 if isinstance(exc, DamagedRun) else 503)
        summary = stored.summary
        return JSONResponse(
            {
                "stamp": str(summary.version),
                "status": summary.status,
                "state": summary.machine_state,
                "pause_id": summary.pause_id,
            }
        )

    async def decide(request: Request, session: Session) -> Response:
        run_id = request.path_params["run_id"]
        assert session.reviewer is not None
        try:
            form = await checked_form(request, session)
            wanted = read_form(run_id, form)
            job = workers.submit(apply, wanted, reviewer=session.reviewer, open_store=open_store, agent=agent)
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(job)), timeout=wait)
        except FormRefused as refused:
            return error(request, session, refused.status, refused.title, refused.message, run_id=run_id)
        except StoreError as exc:
            return unreadable(request, session, exc, run_id=run_id)
        except TimeoutError:
            return RedirectResponse(f"/runs/{quote(run_id, safe='')}?moving=1", status_code=303)
        return RedirectResponse(f"/runs/{quote(run_id, safe='')}?decided={wanted.action}", status_code=303)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        workers.shutdown(wait=True)  # a decision under way finishes: its run rests in the store
        while not readers.empty():
            readers.get_nowait().close()

    static = StaticFiles(directory=str(resources.files("agent_fsm.web") / "static"))
    routes = [
        Route("/", signed_in(inbox)),
        Route("/inbox.json", signed_in(inbox_stamp)),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", signed_in(logout), methods=["POST"]),
        Route("/runs/{run_id}", signed_in(run_page)),
        Route("/runs/{run_id}/status.json", signed_in(run_stamp)),
        Route("/runs/{run_id}/decide", signed_in(decide), methods=["POST"]),
        Route("/runs/{run_id}/claim", signed_in(claim), methods=["POST"]),
        Route("/runs/{run_id}/release", signed_in(claim), methods=["POST"]),
        Mount("/static", static, name="static"),
    ]
    middleware = [Middleware(SecurityHeaders), Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
