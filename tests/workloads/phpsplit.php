<?php
// phpsplit.php: a PHP workload with a known split of its own CPU time.
// `php phpsplit.php SECONDS`: main -> work -> Hot::three / hot_one, 30 and
// 10 ms of the process's CPU at a time (getrusage: the script runs one
// thread), each call timed so, printed at the end as three_ns= and one_ns=;
// and each round a callback through array_map (C calling PHP again):
// work -> array_map -> {closure} -> hot_one, and work -> {eval} -> hot_one.
// Prints pid= first.

function cpu_ns() {
    $r = getrusage();
    return ($r["ru_utime.tv_sec"] + $r["ru_stime.tv_sec"]) * 1000000000
        + ($r["ru_utime.tv_usec"] + $r["ru_stime.tv_usec"]) * 1000;
}

class Hot {
    // Runs `ms` of the process's CPU time, far longer than a scheduler tick.
    public static function three($ms) {
        $s = 0;
        $end = cpu_ns() + $ms * 1000000;
        while (cpu_ns() < $end) {
            for ($i = 0; $i < 2000; $i++) {
                $s += $i * $i;
            }
        }
        return $s;
    }
}

function hot_one($ms) {
    $s = 0;
    $end = cpu_ns() + $ms * 1000000;
    while (cpu_ns() < $end) {
        for ($i = 0; $i < 2000; $i++) {
            $s += $i ^ 7;
        }
    }
    return $s;
}

function work($seconds, &$three_ns, &$one_ns) {
    $t = 0;
    $end = cpu_ns() + $seconds * 1000000000;
    while (cpu_ns() < $end) {
        $a = cpu_ns();
        $t += Hot::three(30);
        $b = cpu_ns();
        $t += hot_one(10);
        $c = cpu_ns();
        $t += array_sum(array_map(function ($x) { return hot_one(1) + $x; }, [1, 2]));
        $t += eval('return hot_one(1);');
        $d = cpu_ns();
        $three_ns += $b - $a;
        $one_ns += ($c - $b) + ($d - $c);
    }
    return $t;
}

function main($argv) {
    echo "pid=", getmypid(), "\n";
    $three_ns = 0;
    $one_ns = 0;
    work((float)($argv[1] ?? "2.0"), $three_ns, $one_ns);
    echo "three_ns=", $three_ns, "\n", "one_ns=", $one_ns, "\n";
}

main($argv);
