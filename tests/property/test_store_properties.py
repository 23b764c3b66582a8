"""Hypothesis properties of the operator's object store: watch events, write responses and re-lists
interleaved in every order never resurrect a deleted object, never move an object back in time, and once
the watch has caught up the store holds exactly what the API holds.

A small model of the API server plays a random script of operations on two pod names (create, update,
graceful delete and its completion, immediate delete, a forced delete the operator confirms, a list). Each
operation yields watch events (delivered in order) and the messages the operator's executor would feed the
store: the write's response (``upsert``), or ``forget`` after a confirmed deletion, as the executor does.
Hypothesis then picks the interleaving: the watch stream stays in order, everything else lands anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.k8s.view.store import ObjectStore

NAMES = ("p0", "p1")
OPS = ("create", "update", "delete_graceful", "finish_graceful", "delete_immediate", "delete_forced", "list")


@dataclass
class FakeApi:
    """What the API server holds, and what it sends: watch events in order, plus out-of-band messages."""

    revision: int = 0
    live: dict[str, dict[str, Any]] = field(default_factory=dict)
    uids: int = 0
    watch: list[tuple[str, Any]] = field(default_factory=list)
    messages: list[tuple[str, Any]] = field(default_factory=list)
    deleted_at: dict[str, int] = field(default_factory=dict)  # uid -> revision of its deletion

    def _bump(self, name: str, **metadata: Any) -> dict[str, Any]:
        self.revision += 1
        old = self.live[name]["metadata"]
        body = {"metadata": {**old, **metadata, "resourceVersion": str(self.revision)}}
        self.live[name] = body
        return body

    def apply(self, op: str, name: str, answered: bool) -> None:
        """Carry out ``op`` on ``name``; ``answered``: the operator made the call and sees the response."""
        pod = self.live.get(name)
        if op == "create" and pod is None:
            self.uids += 1
            self.revision += 1
            uid, rv = f"u{self.uids}", str(self.revision)
            body = {"metadata": {"namespace": "n", "name": name, "uid": uid, "resourceVersion": rv}}
            self.live[name] = body
            self.watch.append(("ADDED", body))
            if answered:
                self.messages.append(("upsert", body))
        elif op == "update" and pod is not None and "deletionTimestamp" not in pod["metadata"]:
            body = self._bump(name, labels={"rv": str(self.revision + 1)})
            self.watch.append(("MODIFIED", body))
            if answered:
                self.messages.append(("upsert", body))
        elif op == "delete_graceful" and pod is not None and "deletionTimestamp" not in pod["metadata"]:
            body = self._bump(name, deletionTimestamp="t")
            self.watch.append(("MODIFIED", body))
            if answered:
                self.messages.append(("upsert", body))  # the executor records a graceful deletion's response
        elif op == "finish_graceful" and pod is not None and "deletionTimestamp" in pod["metadata"]:
            self._gone(name)
        elif op in ("delete_immediate", "delete_forced") and pod is not None:
            # A terminal or unbound pod goes at once; the response is its last state with a deletionTimestamp.
            response = {"metadata": {**pod["metadata"], "deletionTimestamp": "t"}}
            uid = pod["metadata"]["uid"]
            self._gone(name)
            if answered and op == "delete_immediate":
                self.messages.append(("upsert", response))  # the executor cannot tell: it records the body
            elif answered:
                self.messages.append(("forget", ("n", name, uid)))  # forced: the executor forgets it
        elif op == "list":
            self.messages.append(("list", ([dict(b) for b in self.live.values()], str(self.revision))))

    def _gone(self, name: str) -> None:
        self.revision += 1
        pod = self.live.pop(name)
        self.deleted_at[pod["metadata"]["uid"]] = self.revision
        self.watch.append(("DELETED", {"metadata": {**pod["metadata"], "resourceVersion": str(self.revision)}}))


scripts = st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(NAMES), st.booleans()), max_size=25)


def interleave(api: FakeApi, order: list[int]) -> list[tuple[str, Any]]:
    """Every message, in ``order`` (a permutation), except that watch events keep their own order."""
    tagged = [("watch", e) for e in api.watch] + list(api.messages)
    shuffled = [tagged[i] for i in order]
    events = iter(api.watch)
    return [("watch", next(events)) if kind == "watch" else (kind, m) for kind, m in shuffled]


def deliver(store: ObjectStore[str], message: tuple[str, Any]) -> tuple[str, ...]:
    """Feed one message as the operator does; returns the UIDs it proves deleted, if any."""
    kind, payload = message
    if kind == "watch":
        event_type, body = payload
        if event_type == "DELETED":
            store.remove(body)
            return (body["metadata"]["uid"],)
        store.upsert(body)
    elif kind == "upsert":
        store.upsert(payload)
    elif kind == "forget":
        store.forget(*payload)
        return (payload[2],)
    else:
        bodies, rv = payload
        store.replace_all(bodies, rv)
    return ()


@given(script=scripts, data=st.data())
def test_interleavings_never_resurrect_and_converge(script: list[tuple[str, str, bool]], data: st.DataObject) -> None:
    api = FakeApi()
    for op, name, answered in script:
        api.apply(op, name, answered)
    size = len(api.watch) + len(api.messages)
    order = data.draw(st.permutations(range(size)))
    store: ObjectStore[str] = ObjectStore(lambda b: str(b["metadata"]["uid"]), clock=lambda: 0.0)
    proven_deleted: set[str] = set()
    newest: dict[str, int] = {}
    for message in interleave(api, order):
        proven_deleted.update(deliver(store, message))
        for name in NAMES:
            body = store.body("n", name)
            if body is None:
                continue
            uid, rv = body["metadata"]["uid"], int(body["metadata"]["resourceVersion"])
            assert uid not in proven_deleted, f"{name} ({uid}) came back after its deletion was seen"
            assert rv >= newest.get(uid, 0), f"{name} ({uid}) went back from version {newest[uid]} to {rv}"
            newest[uid] = rv
    # The watch has delivered everything: the store holds what the API holds, version for version.
    held = {name: store.body("n", name) for name in NAMES if store.body("n", name) is not None}
    assert held == api.live


def test_delete_response_after_the_deleted_event_does_not_resurrect() -> None:
    """The issue's race, spelled out: DELETED (rv 7) first, then the DELETE response (rv 6) of the same pod."""
    store: ObjectStore[str] = ObjectStore(lambda b: "x", clock=lambda: 0.0)
    pod = {"metadata": {"namespace": "n", "name": "w", "uid": "a", "resourceVersion": "6"}}
    store.upsert(pod)
    assert store.remove({"metadata": {**pod["metadata"], "resourceVersion": "7"}})
    assert not store.upsert({"metadata": {**pod["metadata"], "deletionTimestamp": "t"}})
    assert store.get("n", "w") is None
    successor = {"metadata": {"namespace": "n", "name": "w", "uid": "b", "resourceVersion": "8"}}
    assert store.upsert(successor), "the replacement under the same name is a different object"


def test_tombstones_expire_and_are_capped() -> None:
    now = [0.0]
    store: ObjectStore[str] = ObjectStore(lambda b: "x", clock=lambda: now[0], tombstone_ttl=10.0, max_tombstones=3)
    for i in range(5):
        store.forget("n", f"p{i}", f"u{i}")
    assert store.tombstones == 3, "the oldest tombstones go first once the cap is reached"
    late = {"metadata": {"namespace": "n", "name": "p4", "uid": "u4", "resourceVersion": "1"}}
    assert not store.upsert(late)
    now[0] = 10.5
    store.upsert({"metadata": {"namespace": "n", "name": "q", "uid": "q", "resourceVersion": "2"}})
    assert store.tombstones == 0, "expired tombstones are compacted on the next write"
    assert store.upsert(late), "after expiry the body is accepted again (no request lives that long)"


def test_removal_of_interest_only_blocks_older_versions() -> None:
    store: ObjectStore[str] = ObjectStore(lambda b: "x", clock=lambda: 0.0)
    meta = {"namespace": "n", "name": "p", "uid": "a"}
    store.upsert({"metadata": {**meta, "resourceVersion": "3"}})
    assert store.remove({"metadata": {**meta, "resourceVersion": "4"}}, deleted=False)
    assert not store.upsert({"metadata": {**meta, "resourceVersion": "3"}})
    assert store.upsert({"metadata": {**meta, "resourceVersion": "5"}}), "of interest again, newer: back"
    assert not store.remove({"metadata": {"namespace": "x", "name": "y", "uid": "z"}}, deleted=False)
    assert store.tombstones == 0, "objects never stored leave no tombstone when merely uninteresting"


@settings(max_examples=200)  # a list that finds the store behind the watch needs more than the dev profile's 60
@given(script=scripts, data=st.data())
def test_a_store_without_bodies_keeps_the_same_promises(
    script: list[tuple[str, str, bool]], data: st.DataObject
) -> None:
    """The same scripts and interleavings with ``keep_bodies=False`` (the reconciler's ParallelJobs): what it
    holds is read from the parsed values alone, and re-lists go through ``slim_listed`` as the reflector
    sends them (an unchanged object comes back as the store's own ``Version``)."""
    api = FakeApi()
    for op, name, answered in script:
        api.apply(op, name, answered)
    size = len(api.watch) + len(api.messages)
    order = data.draw(st.permutations(range(size)))
    store: ObjectStore[tuple[str, int, str]] = ObjectStore(
        lambda b: (b["metadata"]["uid"], int(b["metadata"]["resourceVersion"]), str(b["metadata"].get("labels"))),
        clock=lambda: 0.0,
        keep_bodies=False,
    )
    proven_deleted: set[str] = set()
    newest: dict[str, int] = {}
    for kind, payload in interleave(api, order):
        if kind == "list":
            bodies, rv = payload
            store.replace_all([store.slim_listed(b) for b in bodies], rv, slimmed=True)
            for b in bodies:  # the list's version or a newer one is held, unless the object is gone since
                held_after = store.get("n", b["metadata"]["name"])
                if b["metadata"]["uid"] not in api.deleted_at:
                    assert held_after is not None and held_after[1] >= int(b["metadata"]["resourceVersion"])
        else:
            proven_deleted.update(deliver(store, (kind, payload)))  # type: ignore[arg-type]
        for name in NAMES:
            held = store.get("n", name)
            if held is None:
                continue
            uid, rv, _ = held
            assert uid not in proven_deleted, f"{name} ({uid}) came back after its deletion was seen"
            assert rv >= newest.get(uid, 0), f"{name} ({uid}) went back from version {newest[uid]} to {rv}"
            newest[uid] = rv
    expected = {
        name: (b["metadata"]["uid"], int(b["metadata"]["resourceVersion"]), str(b["metadata"].get("labels")))
        for name, b in api.live.items()
    }
    assert {name: store.get("n", name) for name in NAMES if store.get("n", name) is not None} == expected
    assert len(store) == len(expected)


@pytest.mark.parametrize("keep_bodies", [True, False])
def test_a_replaced_object_stays_gone_after_its_replacement_goes_too(keep_bodies: bool) -> None:
    """Found by the property above: p0 was replaced (another UID, newer) and the replacement then dropped by
    a list; a late response for the first p0 must not bring it back."""
    store: ObjectStore[str] = ObjectStore(
        lambda b: str(b["metadata"]["uid"]), clock=lambda: 0.0, keep_bodies=keep_bodies
    )

    def pod(uid: str, rv: int) -> dict[str, Any]:
        return {"metadata": {"namespace": "n", "name": "p0", "uid": uid, "resourceVersion": str(rv)}}

    store.upsert(pod("u1", 1))
    store.upsert(pod("u1", 3))
    store.upsert(pod("u3", 5))  # the first p0 was deleted (its DELETED event not seen yet), another made
    store.replace_all([], "6")  # and that one is gone by this list
    assert not store.upsert(pod("u1", 1)) and store.get("n", "p0") is None


@pytest.mark.parametrize("keep_bodies", [True, False])
def test_an_object_deleted_during_a_long_list_stays_gone(keep_bodies: bool) -> None:
    """A 50,000-job flood's re-list took longer than a tombstone lives: a job that finished and was deleted
    meanwhile came back from a page as it was when the list began (Running, with its placement)."""
    now = [0.0]
    store: ObjectStore[str] = ObjectStore(
        lambda b: str(b["metadata"]["labels"]), clock=lambda: now[0], tombstone_ttl=300.0, keep_bodies=keep_bodies
    )

    def job(rv: int, phase: str, name: str = "f1", uid: str = "u1") -> dict[str, Any]:
        return {"metadata": {"namespace": "n", "name": name, "uid": uid, "resourceVersion": str(rv), "labels": phase}}

    store.upsert(job(5, "Running"))
    with store.listing():
        now[0] = 1.0
        store.upsert(job(7, "Succeeded"))  # its finish written after the list's snapshot (rv 6) was taken
        page = [store.slim_listed(job(5, "Running"))]  # its page: the snapshot's version, older than the stored
        store.forget("n", "f1", "u1")  # finished: its TTL deleted it
        now[0] = 400.0  # the rest of the pages take longer than a tombstone lives
        store.upsert(job(8, "Queued", "f2", "u2"))  # every write compacts the tombstones
        assert store.tombstones == 1, "a tombstone laid during a list waits for it"
        store.replace_all([*page, store.slim_listed(job(8, "Queued", "f2", "u2"))], "6", slimmed=True)
        assert store.get("n", "f1") is None, "the page's old version of a deleted job brought it back"
    now[0] = 800.0
    store.upsert(job(9, "Queued", "f3", "u3"))
    assert store.tombstones == 0, "once the list is merged its tombstones expire as before"
