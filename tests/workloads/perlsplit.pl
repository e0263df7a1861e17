#!/usr/bin/perl
# perlsplit.pl: a Perl workload with a known split of its own CPU time.
# `perl perlsplit.pl SECONDS`: main -> work -> Hot::three / hot_one, 30 and
# 10 ms of the thread's CPU at a time (CLOCK_THREAD_CPUTIME_ID), each call
# timed so, printed at the end as three_ns= and one_ns=; and each round
# hot_one run three more ways: from a sort's comparator (a run loop of its
# own: work -> sort -> by_cost -> hot_one), from an anonymous sub, and from
# a string eval. Prints pid= first.
use strict;
use warnings;
use Time::HiRes qw(clock_gettime CLOCK_THREAD_CPUTIME_ID);

sub cpu_ns {
    return int(clock_gettime(CLOCK_THREAD_CPUTIME_ID) * 1e9);
}

package Hot;

# Runs `ms` of the thread's CPU time, far longer than a scheduler tick.
sub three {
    my ($ms) = @_;
    my $s = 0;
    my $end = main::cpu_ns() + $ms * 1e6;
    while (main::cpu_ns() < $end) {
        for my $i (0 .. 999) {
            $s += $i * $i;
        }
    }
    return $s;
}

package main;

sub hot_one {
    my ($ms) = @_;
    my $s = 0;
    my $end = cpu_ns() + $ms * 1e6;
    while (cpu_ns() < $end) {
        for my $i (0 .. 999) {
            $s += $i ^ 7;
        }
    }
    return $s;
}

sub by_cost {
    hot_one(1);
    return $a <=> $b;
}

sub work {
    my ($seconds) = @_;
    my ($three_ns, $one_ns, $t) = (0, 0, 0);
    my $callback = sub { return hot_one(1) };
    my $end = cpu_ns() + $seconds * 1e9;
    while (cpu_ns() < $end) {
        my $a0 = cpu_ns();
        $t += Hot::three(30);
        my $b0 = cpu_ns();
        $t += hot_one(10);
        my $c0 = cpu_ns();
        my @sorted = sort by_cost 2, 1;
        $t += $callback->();
        $t += eval 'hot_one(1)';
        my $d0 = cpu_ns();
        $three_ns += $b0 - $a0;
        $one_ns += ($c0 - $b0) + ($d0 - $c0);
    }
    return ($three_ns, $one_ns);
}

sub main {
    $| = 1;
    print "pid=$$\n";
    my ($three_ns, $one_ns) = work($ARGV[0] // 2.0);
    print "three_ns=$three_ns\none_ns=$one_ns\n";
}

main();
