# rubysplit.rb: `ruby rubysplit.rb SECONDS`: main -> work -> Hot#three
# (its loop a block Integer#times calls from C) and hot_one (a while
# loop), about 3:1 of the CPU, each call's length drawn at random (a
# fixed-length call sampled at a fixed rate aliases with it), each call
# timed by the thread's own CPU clock, printed at the end as three_ns= and
# one_ns=. Prints pid= first.

$stdout.sync = true

def cpu_ns
  Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID, :nanosecond)
end

class Hot
  def three(n)
    x = 0
    n.times do |i|
      x = (x * 31 + i) % 1_000_003
    end
    x
  end
end

def hot_one(n)
  x = 0
  i = 0
  while i < n
    x = (x * 17 + i) % 1_000_003
    i += 1
  end
  x
end

def work(seconds)
  hot = Hot.new
  rng = Random.new(7)
  three = 0
  one = 0
  stop = cpu_ns + (seconds * 1e9).to_i
  while cpu_ns < stop
    t = cpu_ns
    hot.three(rng.rand(4_000..20_000))
    u = cpu_ns
    hot_one(rng.rand(2_000..10_000))
    three += u - t
    one += cpu_ns - u
  end
  [three, one]
end

def main
  puts "pid=#{Process.pid}"
  three, one = work(Float(ARGV[0] || "2.0"))
  puts "three_ns=#{three}"
  puts "one_ns=#{one}"
end

main
