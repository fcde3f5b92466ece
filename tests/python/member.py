"""One trainer rank or engine worker of the Python client test, as its own
process, using the refit module as an RL job would (host buffers:
bytearrays). Prints one JSON line per event; exits 0 only if every round
committed and (engines) every engine byte held the round's version.

  member.py SERVER SIDE RANK CONVENTION ROUNDS [ENGINE_ID]
            [--die-in-round=N | --freeze-in-round=N] [--first-round=N]
            [--survive] [--rejoin] [--sleep-after-round=N]

--die-in-round=N: exit once round N is announced, before moving its bytes.
--freeze-in-round=N: the same moment, but stop (SIGSTOP) instead: sockets
stay open and nothing on the wire tells the peers; only refitd's heartbeat
timeout does.
--first-round=N: a replacement member, joining for rounds N.. .
--survive: a failed round is not the end: take part in the next one, on
the plan of the membership as it is then (prepare() waits until it is
complete again). Exit code 0 if the last round committed.
--rejoin: when refitd goes away (UNAVAILABLE or NOT_FOUND from any call),
rejoin() it once it is back (a restarted refitd on the same address),
prepare() the new plan, and do the version again from the start.
--sleep-after-round=N: sleep 2 s after round N (the test restarts refitd
then).
REFIT_TEST_JOB_KEY in the environment: the job key refitd was given.
"""
import json
import os
import signal
import sys
import time

import refit
import refit.testing

MODEL = "tiny-qwen3"
TIMEOUT = 60.0


def say(**kw):
    print(json.dumps(kw), flush=True)


def main(argv):
    server, side, rank, convention, rounds = argv[1:6]
    rank, rounds = int(rank), int(rounds)
    engine_id = argv[6] if len(argv) > 6 and not argv[6].startswith("--") else None
    flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    die_in = int(flags.get("die-in-round", 0))
    freeze_in = int(flags.get("freeze-in-round", 0))
    first = int(flags.get("first-round", 1))
    survive = "--survive" in argv
    rejoin = "--rejoin" in argv
    sleep_after = int(flags.get("sleep-after-round", 0))
    want = refit.expected_buffers(side=side, rank=rank, model=MODEL,
                                  convention=convention)
    buffers = {b.name: bytearray(b.nbytes) for b in want}
    m = refit.Member(server=server, side=side, rank=rank, model=MODEL,
                     convention=convention, engine_id=engine_id,
                     buffers=buffers, heartbeat_ms=200, timeout=TIMEOUT,
                     job_key=os.environ.get("REFIT_TEST_JOB_KEY"))
    info = m.prepare(timeout=TIMEOUT)
    say(event="plan", side=side, rank=rank, **info)
    trainer = side == "trainer"
    failed = False
    v = first
    while v <= rounds:
        try:
            r = one_round(m, v, info, side, rank, trainer, survive, failed,
                          rounds, die_in, freeze_in, rejoin)
        except refit.RefitError as e:
            if not rejoin or e.code_name not in ("UNAVAILABLE", "NOT_FOUND"):
                raise
            say(event="refitd_gone", version=v, side=side, rank=rank,
                code=e.code_name, message=e.message)
            t0 = time.monotonic()
            m.rejoin(timeout=TIMEOUT)
            info = m.prepare(timeout=TIMEOUT)
            say(event="rejoined", version=v, side=side, rank=rank,
                after_s=time.monotonic() - t0, **info)
            failed = False
            continue
        if isinstance(r, int):
            return r
        info, failed = r
        if v == sleep_after:
            time.sleep(2)
        v += 1
    m.leave()
    m.close()
    say(event="ok", side=side, rank=rank)
    return 0


def one_round(m, v, info, side, rank, trainer, survive, failed, rounds,
              die_in, freeze_in, rejoin):
    """Round v; returns (info, failed) to go on, or an exit code."""
    if failed or m.plan_changed():
        info = m.prepare(timeout=TIMEOUT)
        say(event="plan", side=side, rank=rank, **info)
        failed = False
    world = info["global_world"]
    if trainer:
        refit.testing.fill_pattern(m, v)
    # Weights of version v ready everywhere (and round v-1 checked)
    # before trainer rank 0 starts round v: a barrier in refitd's store.
    key = f"test/{info['fingerprint']}/{v}"
    if info["global_rank"] != 0:
        m.kv_set(f"{key}/{info['global_rank']}", "1", timeout=TIMEOUT)
    else:
        for r in range(1, world):
            m.kv_get(f"{key}/{r}", timeout=TIMEOUT)
        m.start_round(v, timeout=TIMEOUT)
    got = m.wait_for_round(timeout=TIMEOUT)
    if got != v:
        raise RuntimeError(f"refitd announced round {got}, expected {v}")
    if got == die_in:
        say(event="dying", side=side, rank=rank, version=got)
        os._exit(3)  # a peer dies inside a round: no report, no goodbye
    if got == freeze_in:
        say(event="freezing", side=side, rank=rank, version=got)
        os.kill(os.getpid(), signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        stats = m.run_round(got, timeout=float(os.environ.get("RUN_TIMEOUT", TIMEOUT)))
    except refit.RefitError as e:
        state = {}
        if not trainer and e.code_name == "ABORTED":
            state = m.engine_state(m.engine_id)._asdict()
        say(event="round_failed", version=got, side=side, rank=rank,
            code=e.code_name, message=e.message, after_s=time.monotonic() - t0,
            **state)
        if survive and got < rounds:
            return info, True
        if rejoin and e.code_name in ("UNAVAILABLE", "NOT_FOUND"):
            raise
        return 4
    state = {}
    if not trainer:
        refit.testing.check_pattern(m, got)
        state = m.engine_state(m.engine_id)._asdict()
    say(event="round", version=got, side=side, rank=rank,
        checked=not trainer, **stats, **state)
    return info, False


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except refit.RefitError as e:
        say(event="error", code=e.code_name, message=e.message)
        sys.exit(1)
