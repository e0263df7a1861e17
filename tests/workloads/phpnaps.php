<?php
// phpnaps.php: `php phpnaps.php SECONDS`: main -> work -> nap_a (5 ms
// sleeps) / nap_b (15 ms), the same native place (usleep) from two PHP
// functions, each sleep timed with the monotonic clock (hrtime), printed
// at the end as nap_a_ns= and nap_b_ns=. Prints pid= first.

function nap_a() {
    $t = hrtime(true);
    usleep(5000);
    return hrtime(true) - $t;
}

function nap_b() {
    $t = hrtime(true);
    usleep(15000);
    return hrtime(true) - $t;
}

function work($seconds) {
    $a = 0;
    $b = 0;
    $end = hrtime(true) + $seconds * 1e9;
    while (hrtime(true) < $end) {
        $a += nap_a();
        $b += nap_b();
    }
    return [$a, $b];
}

echo "pid=", getmypid(), "\n";
[$a, $b] = work((float)($argv[1] ?? "1.5"));
echo "nap_a_ns=", $a, "\n", "nap_b_ns=", $b, "\n";
