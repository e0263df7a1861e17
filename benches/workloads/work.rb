# work.rb: fixed Ruby work for the bench (`cargo xtask bench`): ROUNDS calls
# of a method 8 Ruby calls deep around an arithmetic loop, so every sample
# of it is in Ruby code with a 10-frame Ruby chain. Run by Debian's ruby
# (its frames read) and by the same ruby loading a copy of libruby under a
# name sysprof does not take for Ruby's (native frames only): the two runs'
# BPF time per sample is the price of the Ruby frames. Prints
# elapsed_ms=N (the monotonic clock around the work), as the C workloads do.

def leaf(n)
  s = 0
  i = 0
  while i < n
    s += i * i
    i += 1
  end
  s
end

def nest(depth, n)
  depth.zero? ? leaf(n) : nest(depth - 1, n)
end

rounds = Integer(ARGV[0] || "20000")
start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
total = 0
rounds.times { total += nest(8, 2000) }
elapsed_ms = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - start) * 1e3
puts "check=#{total % 7}"
printf("elapsed_ms=%.3f\n", elapsed_ms)
