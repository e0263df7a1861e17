# py.py: fixed Python work for the bench (`cargo xtask bench`): ROUNDS calls
# of a function 8 Python calls deep around an arithmetic loop, so every
# sample of it is in Python code with a 10-frame Python chain. Run by
# Debian's python3 (Python frames read) and by a copy of it under a name
# sysprof does not take for an interpreter (native frames only): the two
# runs' BPF time per sample is the price of the Python frames. Prints
# elapsed_ms=N (CLOCK_MONOTONIC around the work), as the C workloads do.
import sys
import time


def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def nest(depth, n):
    return leaf(n) if depth == 0 else nest(depth - 1, n)


def main(rounds):
    start = time.monotonic_ns()
    total = 0
    for _ in range(rounds):
        total += nest(8, 2000)
    elapsed_ms = (time.monotonic_ns() - start) / 1e6
    print(f"check={total % 7}")
    print(f"elapsed_ms={elapsed_ms:.3f}")


main(int(sys.argv[1]))
