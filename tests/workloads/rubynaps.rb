# rubynaps.rb: `ruby rubynaps.rb SECONDS`: main -> work -> nap_a (5 ms
# sleeps) / nap_b (15 ms), the same native place (Kernel#sleep) from two
# Ruby methods, each sleep timed with the monotonic clock, printed at the
# end as nap_a_ns= and nap_b_ns=. Prints pid= first.

$stdout.sync = true

def now_ns
  Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
end

def nap_a
  t = now_ns
  sleep 0.005
  now_ns - t
end

def nap_b
  t = now_ns
  sleep 0.015
  now_ns - t
end

def work(seconds)
  a = 0
  b = 0
  stop = now_ns + (seconds * 1e9).to_i
  while now_ns < stop
    a += nap_a
    b += nap_b
  end
  [a, b]
end

puts "pid=#{Process.pid}"
a, b = work(Float(ARGV[0] || "1.5"))
puts "nap_a_ns=#{a}"
puts "nap_b_ns=#{b}"
