"""Distributed failures: collective timeouts, communication errors, and a rank that died.

``dist.timeout`` parses the watchdog lines (op, sequence number, timeout, elapsed) and
infers the suspect rank: the ranks that *report* a timeout are the healthy ones waiting,
so a rank of the world that never reported one (or whose last enqueued work is behind
the timed-out one) is the one that did not join. ``dist.rank_failure`` reads torchrun's
ChildFailedError rows (failed rank, exit code, signal, host); the rank's own cause, when
another rule finds it, is primary through the cards' ``explains``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import regex

from autopsy.checks.common import (
    config_lookup,
    earliest,
    evidence_for,
    group,
    group_int,
    hit_rank,
    hits_of,
    line_rule,
    normalise_key,
    rank_phrase,
    recovered,
    signal_name,
    where,
)
from autopsy.checks.tb_causes import gate_closed
from autopsy.engine.types import CheckContext
from autopsy.model import Evidence, Finding
from autopsy.parsers.types import ChildFailure, Hit

_RANK_IN_TEXT = regex.compile(r"\[(?:PG[^\]]*?)?Rank (?P<rank>\d+)\]")
_BACKEND = {"watchdog": "nccl", "timeout_at_work": "nccl", "heartbeat": "nccl", "gloo_timeout": "gloo",
            "store_timeout": "store", "rendezvous_timeout": "rendezvous", "hccl_notify_timeout": "hccl"}


def _rank(hit: Hit, ctx: CheckContext) -> int | None:
    r = hit_rank(hit, ctx.run)
    if r is not None:
        return r
    m = _RANK_IN_TEXT.search(hit.text)
    return int(m.group("rank")) if m else None


def _world(ctx: CheckContext) -> set[int]:
    ranks: set[int] = set()
    for scan in ctx.run.logs:
        ranks.update(scan.ranks_seen)
        if scan.rank is not None:
            ranks.add(scan.rank)
    ranks.update(cf.rank for cf in ctx.run.all_child_failures if cf.rank is not None)
    entry = config_lookup(ctx.run, list(ctx.params.get("world_size_keys", ())))
    if entry is not None and isinstance(entry.value, int) and not isinstance(entry.value, bool) \
            and 0 < entry.value <= 4096:
        ranks.update(range(entry.value))
    return ranks


def timeout(ctx: CheckContext) -> Iterable[Finding]:
    min_after = int(ctx.params.get("progress_after_steps", 2))
    names = [n for n in _BACKEND if ctx.hits.get(n)]
    hits = [h for h in hits_of(ctx, *names) if not recovered(ctx.run, h, min_after)] if names else []
    if not hits:
        return []
    name_of = {id(h): n for n in names for h in ctx.hits.get(n, ())}
    lead = earliest(hits)
    facts: dict[str, Any] = {"backend": _BACKEND.get(name_of.get(id(lead), ""), "nccl"), "count": len(hits)}
    watch = [h for h in hits if name_of.get(id(h)) == "watchdog"]
    if watch:
        ops = Counter(group(h, "op") for h in watch)
        facts["op"] = ops.most_common(1)[0][0]
        seqs = sorted({s for h in watch if (s := group_int(h, "seq")) is not None})
        if seqs:  # torch 1.9's watchdog line names no SeqNum
            facts["seq"] = seqs[0] if len(seqs) == 1 else seqs
        tms = group_int(watch[0], "timeout_ms")
        if tms is not None:
            facts["timeout_ms"] = tms
            facts["timeout_s"] = tms / 1000.0
        ran = [r for h in watch if (r := group_int(h, "ran_ms")) is not None]
        if ran:  # a terminal that breaks long lines can split "ran for N milliseconds" off the line
            facts["ran_ms"] = max(ran)
        if group_int(watch[0], "numel_in") is not None:
            facts["numel_in"] = group_int(watch[0], "numel_in")
    else:
        for g in ("op", "timeout_ms", "timeout_s", "joined", "expected", "stuck_s", "seq"):
            v = group(lead, g)
            if v is not None:
                facts[g] = int(v) if v.isdigit() else v
    waiting = sorted({r for h in hits if (r := _rank(h, ctx)) is not None})
    if waiting:
        facts["waiting_ranks"] = waiting
    suspects: set[int] = set()
    world = _world(ctx)
    missing = sorted(world - set(waiting)) if waiting else []
    if missing and len(missing) <= int(ctx.params.get("max_missing_ranks", 4)):
        suspects.update(missing)
    # A rank whose last enqueued work is below the timed-out sequence number never issued that collective.
    for h in [*ctx.hits.get("timeout_at_work", ()), *ctx.hits.get("ctx_detected", ())]:
        seq, enq = group_int(h, "seq"), group_int(h, "last_enqueued")
        r = _rank(h, ctx)
        if seq is not None and enq is not None and enq < seq and r is not None:
            suspects.add(r)
    if suspects:
        facts["suspect_ranks"] = sorted(suspects)
    if world:
        facts["world_size_seen"] = len(world)
    if lead.step is not None:
        facts["step"] = lead.step
    evidence: list[Evidence] = evidence_for([lead, *[h for h in hits if h is not lead]])
    msg = _timeout_message(facts, lead)
    key = f"{facts['backend']}:{facts.get('op', name_of.get(id(lead), ''))}"
    return [ctx.finding(msg, key=key, facts=facts, evidence=evidence, step=lead.step, wall_time=lead.wall_time)]


def _timeout_message(facts: Mapping[str, Any], lead: Hit) -> str:
    op = f"{facts['op']} " if "op" in facts and facts.get("backend") in ("nccl", "gloo", "hccl") else ""
    seq = f" (SeqNum {facts['seq']})" if isinstance(facts.get("seq"), int) else ""
    after = f" after {facts['timeout_s']:g} s" if "timeout_s" in facts else ""
    waiting = facts.get("waiting_ranks")
    who = rank_phrase({"ranks": waiting}) if waiting else ""
    suspect = ""
    if facts.get("suspect_ranks"):
        s = facts["suspect_ranks"]
        suspect = f"; rank{'s' if len(s) > 1 else ''} {', '.join(map(str, s))} never joined (look there first)"
    at = f" at step {facts['step']}" if "step" in facts else ""
    return (f"A {facts['backend'].upper()} {op}collective{seq} timed out{after}{who}{at} ({where(lead)})"
            f"{suspect}.")


def comm(ctx: CheckContext) -> Iterable[Finding]:
    def skip(hit: Hit) -> bool:
        return "NCCL INFO" in hit.text or gate_closed(ctx, hit)

    def facts(hit: Hit) -> dict[str, Any]:
        out: dict[str, Any] = {"error": group(hit, "error") or group(hit, "nccl_code") or group(hit, "reason")}
        timeout_s = group(hit, "timeout_s")
        timeout_ms = group(hit, "timeout_ms")
        if timeout_s is not None or timeout_ms is not None:
            out["connect_timeout_s"] = int(timeout_s) if timeout_s is not None else int(timeout_ms or 0) / 1000.0
            out["error"] = "could not connect to the rendezvous store (TCPStore connect timed out)"
        return out

    def message(hit: Hit, f: Mapping[str, Any], n: int) -> str:
        err = f.get("error") or hit.text.strip()[:120]
        peer = f" (peer {f['peer']})" if f.get("peer") else ""
        return f"Distributed communication failed: {err}{peer}{rank_phrase(f)} ({where(hit)})."

    def key(hit: Hit) -> str:
        if group(hit, "timeout_s") is not None or group(hit, "timeout_ms") is not None:
            return normalise_key("store_connect_timeout")  # one failure, two torch versions' wording
        return normalise_key(str(group(hit, "error") or group(hit, "nccl_code") or group(hit, "reason")
                                 or hit.key.rsplit("/", 1)[-1]))

    return line_rule(ctx, names=("nccl_error_in", "nccl_error", "nccl_aborted", "nccl_code", "ib_completion",
                                 "peer_closed", "rendezvous_connect", "store_connect_timeout", "client_socket_timeout",
                                 "rendezvous_error", "dist_network_error", "frames_address_in_use", "tf_unavailable"),
                     message=message, facts=facts, key=key, skip=skip)


def _exit_meaning(exitcode: int | None, sig: str | None) -> str:
    if sig:
        return {"SIGKILL": "SIGKILL: host OOM killer or an external kill", "SIGSEGV": "SIGSEGV: native crash",
                "SIGABRT": "SIGABRT: aborted (C++ exception / watchdog)", "SIGTERM": "SIGTERM: stopped from outside",
                "SIGBUS": "SIGBUS: bus error (shared memory?)"}.get(sig, sig)
    if exitcode == 1:
        return "a Python exception"
    if exitcode is not None and exitcode > 128:
        return signal_name(exitcode - 128) or f"exit code {exitcode}"
    return f"exit code {exitcode}" if exitcode is not None else "an unknown error"


# Ray's WorkerExitType (src/ray/protobuf/common.proto) in words.
_RAY_EXIT = {"SYSTEM_ERROR": "it ended without an error of its own (killed from outside or crashed)",
             "USER_ERROR": "an exception in the task's or actor's own code",
             "NODE_OUT_OF_MEMORY": "Ray's memory monitor killed it: the node ran low on memory"}


def _ray_worker_failure(ctx: CheckContext, facts: dict[str, Any], evidence: list[Evidence]) -> Finding:
    """A Ray worker died: the raylet's report (PID, node, exit type) and Ray Train's "Worker N has failed"."""
    died = hits_of(ctx, "ray_worker_died")
    train = hits_of(ctx, "ray_train_worker_failed")
    lead = earliest(died or train)
    for name in ("pid", "host", "ray_exit_type"):
        value = next((group(h, name) for h in died if group(h, name)), None)
        if value is not None:
            facts[name] = value
    if train:
        facts["failed_rank"] = group_int(train[0], "rank")
        facts["trainer"] = group(train[0], "trainer")
    facts = {k: v for k, v in facts.items() if v is not None}
    exit_type = facts.get("ray_exit_type")
    pid = f" (PID {facts['pid']}" + (f" on {facts['host']})" if "host" in facts else ")") if "pid" in facts else ""
    how = f" with exit type {exit_type}: {_RAY_EXIT.get(exit_type, exit_type)}" if exit_type else ""
    said = f"A Ray worker{pid} died{how} ({where(died[0])})" if died else ""
    if train:
        failed = f"{facts['trainer']} reported its worker {facts['failed_rank']} failed ({where(train[0])})"
        said = f"{said}, and {failed}" if said else failed[0].upper() + failed[1:]
    msg = (f"{said}; the job stopped. Ray names the OOM killer, `ray stop --force` or a native crash only as "
           f"possible causes: the dead worker's own log (worker-*-{facts.get('pid', '<pid>')}.err under "
           f"/tmp/ray/session_latest/logs on that node), its raylet.out and the node's dmesg say which.")
    key = f"rank_failure:ray:{exit_type or 'unknown'}"
    return ctx.finding(msg, key=key, facts=facts, evidence=evidence, step=lead.step, wall_time=lead.wall_time)


def rank_failure(ctx: CheckContext) -> Iterable[Finding]:
    failures: list[ChildFailure] = list(ctx.run.all_child_failures)
    hits = hits_of(ctx)
    if not failures and not hits:
        return []
    facts: dict[str, Any] = {}
    evidence: list[Evidence] = []
    lead_hit = earliest(hits) if hits else None
    if failures:
        roots = [f for f in failures if f.root_cause] or failures
        cf = roots[0]
        sig = cf.signal or (signal_name(-cf.exitcode) if cf.exitcode is not None and cf.exitcode < 0 else None)
        facts.update({"failed_rank": cf.rank, "local_rank": cf.local_rank, "exitcode": cf.exitcode, "signal": sig,
                      "host": cf.host, "pid": cf.pid, "error_file": cf.error_file})
        failed = sorted({f.rank for f in failures if f.rank is not None})
        facts["failed_ranks"] = failed
        evidence.append(Evidence(path=cf.path, line=cf.line, rank=cf.rank,
                                 detail=f"rank {cf.rank} exitcode {cf.exitcode}" + (f" ({sig})" if sig else "")
                                 + (f" on {cf.host}" if cf.host else "")))
        where_ = f"{cf.path}:{cf.line}"
    else:
        assert lead_hit is not None
        rich = next((h for h in hits if group(h, "exitcode") or group(h, "signal")), lead_hit)
        facts["failed_rank"] = group_int(rich, "rank")
        facts["local_rank"] = group_int(rich, "local_rank")
        facts["exitcode"] = group_int(rich, "exitcode")
        sig = group(rich, "signal")
        if sig is None and facts["exitcode"] is not None and facts["exitcode"] < 0:
            sig = signal_name(-facts["exitcode"])
        facts["signal"] = sig
        facts["host"] = group(rich, "host")
        where_ = where(rich)
    if hits:
        evidence.extend(evidence_for(hits, limit=3))
    rank = facts.get("failed_rank") if facts.get("failed_rank") is not None else facts.get("local_rank")
    if rank is not None:
        logs = [s.path for s in ctx.run.logs if s.rank == rank]
        if logs:
            facts["rank_logs"] = logs
    facts = {k: v for k, v in facts.items() if v is not None}
    operator = next((h for h in hits if group(h, "replica_type")), None) if not failures else None
    if operator is not None:
        # a Kubernetes operator's job condition: it names the replicas that failed, not their exit or signal
        for g in ("job_kind", "job_name", "replica_type"):
            facts[g] = group(operator, g)
        facts["failed_replicas"] = group_int(operator, "failed_replicas")
        facts = {k: v for k, v in facts.items() if v is not None}
        count = f"{facts['failed_replicas']} " if "failed_replicas" in facts else ""
        msg = (f"{count}{facts['replica_type']} replica(s) of {facts['job_kind']} {facts['job_name']} failed and the "
               f"Kubeflow operator failed the whole job ({where(operator)}); the replica's own log (kubectl logs "
               f"--previous) or its pod's last state says why it died.")
        return [ctx.finding(msg, key=f"rank_failure:{facts['replica_type']}", facts=facts, evidence=evidence,
                            step=operator.step, wall_time=operator.wall_time)]
    if not failures and hits_of(ctx, "ray_worker_died", "ray_train_worker_failed"):
        return [_ray_worker_failure(ctx, facts, evidence)]
    lame = hits_of(ctx, "tf_lame_workers") if not failures else []
    if lame:
        # TensorFlow's heartbeat: a worker host stopped answering, so there is no exit code or signal to name
        lead = earliest(lame)
        facts["host"] = group(lead, "host")
        msg = (f"TensorFlow's ShutdownHook found worker {facts['host']} lame ({where(lead)}): the worker host stopped "
               f"answering its heartbeat (it died, or it was preempted, as a preemptible TPU is taken back) and the "
               f"session was shut down; the worker's own log or the TPU's state (gcloud compute tpus describe) says "
               f"which.")
        return [ctx.finding(msg, key="rank_failure:lame_worker", facts=facts, evidence=evidence,
                            step=lead.step, wall_time=lead.wall_time)]
    meaning = _exit_meaning(facts.get("exitcode"), facts.get("signal"))
    pod = next((h for h in hits if group(h, "pod")), None) if not failures else None
    if pod is not None:
        # the operator's event for a replica pod: it names the pod and its exit code, not a rank
        facts["pod"] = group(pod, "pod")
        facts["exitcode"] = group_int(pod, "exitcode")
        meaning = _exit_meaning(facts["exitcode"], None)
        msg = (f"Replica pod {facts['pod']} exited with code {facts['exitcode']} ({meaning}) ({where(pod)}); "
               f"the pod's own log (kubectl logs --previous) says why its training died.")
        return [ctx.finding(msg, key=f"rank_failure:pod:{facts['exitcode']}", facts=facts, evidence=evidence,
                            step=pod.step, wall_time=pod.wall_time)]
    who = f"Rank {rank}" if rank is not None else "A rank"
    code = f" with exit code {facts['exitcode']}" if "exitcode" in facts else ""
    host = f" on {facts['host']}" if "host" in facts else ""
    own = f"; its own log: {', '.join(facts['rank_logs'][:2])}" if "rank_logs" in facts else ""
    msg = f"{who}{host} died{code} ({meaning}) and the launcher stopped the job ({where_}){own}."
    key = f"rank_failure:{facts.get('signal') or facts.get('exitcode', '?')}"
    step = lead_hit.step if lead_hit is not None else None
    return [ctx.finding(msg, key=key, facts=facts, evidence=evidence, step=step,
                        wall_time=lead_hit.wall_time if lead_hit is not None else None)]
