#!/usr/bin/perl
# perlnaps.pl: `perl perlnaps.pl SECONDS`: main -> work -> nap_a (5 ms
# sleeps) / nap_b (15 ms), the same native place (Time::HiRes::usleep) from
# two Perl subs, each sleep timed with the monotonic clock, printed at the
# end as nap_a_ns= and nap_b_ns=. Prints pid= first.
use strict;
use warnings;
use Time::HiRes qw(usleep clock_gettime CLOCK_MONOTONIC);

sub now_ns {
    return int(clock_gettime(CLOCK_MONOTONIC) * 1e9);
}

sub nap_a {
    my $t = now_ns();
    usleep(5000);
    return now_ns() - $t;
}

sub nap_b {
    my $t = now_ns();
    usleep(15000);
    return now_ns() - $t;
}

sub work {
    my ($seconds) = @_;
    my ($a_ns, $b_ns) = (0, 0);
    my $end = now_ns() + $seconds * 1e9;
    while (now_ns() < $end) {
        $a_ns += nap_a();
        $b_ns += nap_b();
    }
    return ($a_ns, $b_ns);
}

$| = 1;
print "pid=$$\n";
my ($a_ns, $b_ns) = work($ARGV[0] // 1.5);
print "nap_a_ns=$a_ns\nnap_b_ns=$b_ns\n";
