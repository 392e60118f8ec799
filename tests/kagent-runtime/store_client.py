"""Drives the session store (`hitl-operator sessions`) with kagent's agent runtime's own
clients, as installed in a runtime venv of `make runtime-peers` (kagent-adk 0.7.4 or 0.10.4):
KAgentSessionService (kagent/adk/_session_service.py), KAgentTaskStore
(kagent/core/a2a/_task_store.py) and the token service's request hook (kagent/adk/_token.py)
that adds X-Agent-Name and the bearer token read from KAGENT_TOKEN_PATH, on one httpx client as
the runtime builds it (kagent/adk/_a2a.py).

Usage: store_client.py BASE_URL APP_NAME TOKEN_FILE OTHER_APP_NAME
  APP_NAME        the Agent whose pod TOKEN_FILE's token is bound to, as the runtime names it
                  (`<namespace>__NS__<name>`, `-` written `_`)
  TOKEN_FILE      that pod's projected token (audience hitl-operator-sessions)
  OTHER_APP_NAME  another Agent of the store, whose name the checks use to be refused
The users are suffixed with the runtime's version (alice-0.7.4), so that the script runs once
per runtime against one store. Prints one line per check; exits non-zero on the first failure.
"""

import asyncio
import importlib
import importlib.metadata
import sys
import tempfile

import httpx
from a2a.types import Message, Part, Task, TaskState, TaskStatus, TextPart
from google.adk.events import Event, EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types


VERSION = importlib.metadata.version("kagent-adk")
# The 0.7.4 client builds the session from the events it read, then appends each one again
# (BaseSessionService.append_event): every event is there twice, in the order read. Later
# clients start from no events.
READ_TWICE = VERSION == "0.7.4"
session_service = importlib.import_module("kagent.adk._session_service")
task_store = importlib.import_module("kagent.core.a2a._task_store")
token = importlib.import_module("kagent.adk._token")


def check(what, condition):
    if not condition:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}")


def text_event(invocation, author, text, delta=None):
    return Event(
        invocation_id=invocation,
        author=author,
        content=types.Content(role="user" if author == "user" else "model", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta or {}),
    )


def client_of(base_url, app_name):
    """An httpx client as the runtime builds it, its token service reading KAGENT_TOKEN_PATH."""
    tokens = token.KAgentTokenService(app_name)
    tokens.token = token.read_token()
    return httpx.AsyncClient(base_url=base_url, event_hooks=tokens.event_hooks())


async def status_of(call):
    """The HTTP status a client call failed with (None when it did not fail)."""
    try:
        await call
    except httpx.HTTPStatusError as e:
        return e.response.status_code
    return None


async def main(base_url, app_name, token_file, other_app_name):
    token.KAGENT_TOKEN_PATH = token_file
    client = client_of(base_url, app_name)
    sessions = session_service.KAgentSessionService(client)
    tasks = task_store.KAgentTaskStore(client)
    alice, bob = f"alice-{VERSION}", f"bob-{VERSION}"

    # The executor's _prepare_session: get, then create when there is none.
    got = await sessions.get_session(app_name=app_name, user_id=alice, session_id="ctx-1")
    check("an unknown session is None", got is None)
    created = await sessions.create_session(
        app_name=app_name, user_id=alice, state={"session_name": "hello"}, session_id="ctx-1"
    )
    check("create_session keeps the id and user", (created.id, created.user_id) == ("ctx-1", alice))

    # A turn: the runner appends the user's message, a function call and response, the answer.
    session = await sessions.get_session(app_name=app_name, user_id=alice, session_id="ctx-1")
    check("the new session has no events", session is not None and session.events == [])
    call = Event(
        invocation_id="inv-1",
        author="agent",
        content=types.Content(
            role="model",
            parts=[types.Part(function_call=types.FunctionCall(id="fc-1", name="read_file", args={"path": "/etc/x"}))],
        ),
    )
    response = Event(
        invocation_id="inv-1",
        author="agent",
        content=types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(id="fc-1", name="read_file", response={"text": "é \"quoted\"\n"})
                )
            ],
        ),
    )
    sent = [
        text_event("inv-1", "user", "read /etc/x", {"turns": 1}),
        call,
        response,
        text_event("inv-1", "agent", "done", {"app:last": "read_file"}),
    ]
    for event in sent:
        await sessions.append_event(session, event)

    again = await sessions.get_session(app_name=app_name, user_id=alice, session_id="ctx-1")
    copies = 2 if READ_TWICE else 1
    check(
        "the events come back in the order appended",
        [e.id for e in again.events] == [e.id for e in sent] * copies,
    )
    check(
        "each event comes back equal to the one sent",
        [e.model_dump() for e in again.events[: len(sent)]] == [e.model_dump() for e in sent],
    )
    check("the state deltas replay into the state", again.state == {"turns": 1, "app:last": "read_file"})
    recent = await sessions.get_session(
        app_name=app_name, user_id=alice, session_id="ctx-1", config=GetSessionConfig(num_recent_events=2)
    )
    check(
        "num_recent_events keeps the last events",
        [e.id for e in recent.events] == [e.id for e in sent[2:]] * copies,
    )

    # Users are apart.
    other = await sessions.get_session(app_name=app_name, user_id=bob, session_id="ctx-1")
    check("another user does not see the session", other is None)
    listed = await sessions.list_sessions(app_name=app_name, user_id=alice)
    check("list_sessions lists the user's session", [s.id for s in listed.sessions] == ["ctx-1"])
    listed = await sessions.list_sessions(app_name=app_name, user_id=bob)
    check("list_sessions of a user with none is empty", listed.sessions == [])

    # A session with no id gets one.
    fresh = await sessions.create_session(app_name=app_name, user_id=alice)
    check("a session created without an id gets one", bool(fresh.id) and fresh.id != "ctx-1")

    # Another Agent named, by agent_ref or X-Agent-Name: 403; no token: 401.
    check(
        "a session with another Agent's agent_ref is refused (403)",
        await status_of(sessions.create_session(app_name=other_app_name, user_id=alice, session_id="x")) == 403,
    )
    other = client_of(base_url, other_app_name)
    check(
        "X-Agent-Name of another Agent is refused (403)",
        await status_of(session_service.KAgentSessionService(other).list_sessions(app_name=other_app_name, user_id=alice))
        == 403,
    )
    await other.aclose()
    with tempfile.NamedTemporaryFile("w", suffix=".token") as empty:
        token.KAGENT_TOKEN_PATH = empty.name
        anonymous = client_of(base_url, app_name)
        token.KAGENT_TOKEN_PATH = token_file
        check(
            "no token is refused (401)",
            await status_of(session_service.KAgentSessionService(anonymous).list_sessions(app_name=app_name, user_id=alice))
            == 401,
        )
        await anonymous.aclose()

    # A context id that smuggles a user into the URL the runtime builds: never that user's
    # session. 0.7.4 writes it into the URL unescaped (the store refuses the unknown parameter,
    # 400); 0.10.4's httpx replaces the URL's query with its params (alice's own partition is
    # asked for a session "ctx-bob": none).
    await sessions.create_session(app_name=app_name, user_id=bob, state={}, session_id="ctx-bob")
    await sessions.append_event(
        await sessions.get_session(app_name=app_name, user_id=bob, session_id="ctx-bob"),
        text_event("inv-b", "user", "bob's secret"),
    )
    try:
        smuggled = await sessions.get_session(app_name=app_name, user_id=alice, session_id=f"ctx-bob?user_id={bob}&")
        outcome = "none" if smuggled is None else f"a session of {smuggled.user_id} with {len(smuggled.events)} events"
    except httpx.HTTPStatusError as e:
        outcome = f"HTTP {e.response.status_code}"
    check(
        f"a context id carrying ?user_id={bob}& does not reach bob's session ({outcome})",
        outcome in ("none", "HTTP 400"),
    )
    await sessions.delete_session(app_name=app_name, user_id=bob, session_id="ctx-bob")

    await sessions.delete_session(app_name=app_name, user_id=alice, session_id="ctx-1")
    gone = await sessions.get_session(app_name=app_name, user_id=alice, session_id="ctx-1")
    check("a deleted session is None", gone is None)

    # The A2A task store.
    check("an unknown task is None", await tasks.get("task-1") is None)
    task = Task(
        id="task-1",
        context_id="ctx-2",
        status=TaskStatus(state=TaskState.working),
        history=[Message(role="user", message_id="m-1", parts=[Part(root=TextPart(text="hi"))])],
        metadata={"kagent_user_id": alice},
    )
    await tasks.save(task)
    check("a saved task comes back equal", await tasks.get("task-1") == task)
    task.status = TaskStatus(state=TaskState.input_required)
    await tasks.save(task)
    check("a task saved again is replaced", (await tasks.get("task-1")).status.state == TaskState.input_required)
    await tasks.delete("task-1")
    check("a deleted task is None", await tasks.get("task-1") is None)

    await client.aclose()
    print(f"all passed (kagent-adk {VERSION})")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    asyncio.run(main(*sys.argv[1:]))
