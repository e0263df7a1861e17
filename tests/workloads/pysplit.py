# pysplit.py: a Python workload with a known split of its own CPU time.
# `split SECONDS`: main -> work -> hot_three / hot_one, 30 and 10 ms of
# CPU at a time, each call timed with the thread's own CPU clock (time.thread_time_ns),
# printed at the end on lines three_ns= and one_ns=. `hash SECONDS`: main ->
# work -> hash_work -> hashlib.sha256 over 16 MiB (C code under a Python
# frame). `naps SECONDS`: main -> work -> nap_a (5 ms sleeps) / nap_b (15 ms),
# each timed with CLOCK_MONOTONIC, printed as nap_a_ns= and nap_b_ns=: the
# same native place (time.sleep) from two Python functions. Prints pid= first.
import hashlib
import os
import sys
import time


def hot_three(ms):
    # Runs `ms` of the thread's CPU time: phases far longer than a scheduler
    # tick, so preemption beside a load cannot line up with them.
    s = 0
    end = time.thread_time_ns() + ms * 1_000_000
    while time.thread_time_ns() < end:
        for i in range(2000):
            s += i * i
    return s


def hot_one(ms):
    s = 0
    end = time.thread_time_ns() + ms * 1_000_000
    while time.thread_time_ns() < end:
        for i in range(2000):
            s += i ^ 3
    return s


def hash_work(buf):
    return hashlib.sha256(buf).hexdigest()


def nap_a():
    time.sleep(0.005)


def nap_b():
    time.sleep(0.015)


def naps(seconds):
    a = b = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic_ns()
        nap_a()
        t1 = time.monotonic_ns()
        nap_b()
        t2 = time.monotonic_ns()
        a += t1 - t0
        b += t2 - t1
    print(f"nap_a_ns={a}\nnap_b_ns={b}", flush=True)


def work(mode, seconds):
    if mode == "naps":
        naps(seconds)
        return 0, 0
    three = one = 0
    buf = b"x" * (16 << 20)
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        if mode == "hash":
            hash_work(buf)
            continue
        a = time.thread_time_ns()
        hot_three(30)
        b = time.thread_time_ns()
        hot_one(10)
        c = time.thread_time_ns()
        three += b - a
        one += c - b
    return three, one


def main():
    print(f"pid={os.getpid()}", flush=True)
    three, one = work(sys.argv[1], float(sys.argv[2]))
    if sys.argv[1] != "naps":
        print(f"three_ns={three}\none_ns={one}", flush=True)


main()
