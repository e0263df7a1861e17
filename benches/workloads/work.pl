#!/usr/bin/perl
# work.pl: fixed Perl work for the bench (`cargo xtask bench`): ROUNDS calls
# of a sub 8 Perl calls deep around an arithmetic loop, so every sample of
# it is in Perl code with a 10-frame Perl chain. Run by Debian's perl (its
# subs read) and by a copy of it under a name sysprof does not take for
# Perl (native frames only): the two runs' BPF time per sample is the price
# of the Perl frames. Prints elapsed_ms=N (the monotonic clock around the
# work), as the C workloads do.
use strict;
use warnings;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);

sub leaf {
    my ($n) = @_;
    my $s = 0;
    for my $i (0 .. $n - 1) {
        $s += $i * $i;
    }
    return $s;
}

sub nest {
    my ($depth, $n) = @_;
    return $depth == 0 ? leaf($n) : nest($depth - 1, $n);
}

my $rounds = $ARGV[0] // 20000;
my $start = clock_gettime(CLOCK_MONOTONIC);
my $total = 0;
for my $r (1 .. $rounds) {
    $total += nest(8, 2000);
}
my $elapsed_ms = (clock_gettime(CLOCK_MONOTONIC) - $start) * 1e3;
print "check=", $total % 7, "\n";
printf "elapsed_ms=%.3f\n", $elapsed_ms;
