<?php
// work.php: fixed PHP work for the bench (`cargo xtask bench`): ROUNDS
// calls of a function 8 PHP calls deep around an arithmetic loop, so every
// sample of it is in PHP code with a 10-frame PHP chain. Run by Debian's
// php8.2 (PHP frames read) and by a copy of it under a name sysprof does
// not take for PHP (native frames only): the two runs' BPF time per sample
// is the price of the PHP frames. Prints elapsed_ms=N (the monotonic clock
// around the work), as the C workloads do.

function leaf($n) {
    $s = 0;
    for ($i = 0; $i < $n; $i++) {
        $s += $i * $i;
    }
    return $s;
}

function nest($depth, $n) {
    return $depth == 0 ? leaf($n) : nest($depth - 1, $n);
}

function main($rounds) {
    $start = hrtime(true);
    $total = 0;
    for ($r = 0; $r < $rounds; $r++) {
        $total += nest(8, 2000);
    }
    $elapsed_ms = (hrtime(true) - $start) / 1e6;
    echo "check=", $total % 7, "\n";
    printf("elapsed_ms=%.3f\n", $elapsed_ms);
}

main((int)($argv[1] ?? "30000"));
