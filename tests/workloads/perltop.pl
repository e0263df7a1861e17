#!/usr/bin/perl
# perltop.pl: `perl perltop.pl SECONDS`: Perl code called from C at the top
# level, not from a sub: a sort's comparator by name (a MULTICALL sub: its
# context stays between calls while the sort compares in C), an object's
# DESTROY, and at the end an END block; each spends its time in
# main::spin. Prints pid= first.
use strict;
use warnings;
use Time::HiRes qw(clock_gettime CLOCK_THREAD_CPUTIME_ID);

sub cpu_ns {
    return int(clock_gettime(CLOCK_THREAD_CPUTIME_ID) * 1e9);
}

sub spin {
    my ($ms) = @_;
    my $s = 0;
    my $end = cpu_ns() + $ms * 1e6;
    while (cpu_ns() < $end) {
        for my $i (0 .. 999) {
            $s += $i * $i;
        }
    }
    return $s;
}

sub by_cost {
    spin(1);
    return $a <=> $b;
}

package Obj;

sub new { return bless {}, shift }

sub DESTROY { main::spin(2) }

package main;

$| = 1;
print "pid=$$\n";
my $end = cpu_ns() + ($ARGV[0] // 1.5) * 1e9;
while (cpu_ns() < $end) {
    my @sorted = sort by_cost 3, 1, 2;
    {
        my $object = Obj->new;
    }
    # A sort comparing in C, its block between calls (no sub).
    my @numbers = sort { $b <=> $a } map { $_ * 7 % 1000 } 1 .. 3000;
}

END {
    spin(300);
}
