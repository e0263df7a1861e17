# rbspy_rdoc.rb: `ruby rbspy_rdoc.rb OUT_DIR SOURCE...`: prints pid=, waits
# for a line on stdin (an outside sampler attaches meanwhile), then runs
# RDoc (Ruby's own documentation tool: code nobody here wrote) over SOURCE
# into OUT_DIR, as `rdoc -q --ri --op OUT_DIR SOURCE...` would, and prints
# cpu_ns= (the process's CPU over the run), run_delay_ns= (its time
# waiting for a CPU, from /proc/self/schedstat) and wall_ns= (the run's
# time on the monotonic clock): what is left of the wall time it spent blocked.

$stdout.sync = true

def run_delay_ns
  File.read("/proc/self/schedstat").split[1].to_i
end

puts "pid=#{Process.pid}"
$stdin.gets
require "rdoc/rdoc"
cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID, :nanosecond)
delay = run_delay_ns
wall = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
RDoc::RDoc.new.document(["-q", "--ri", "--op", ARGV[0], *ARGV[1..]])
puts "cpu_ns=#{Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID, :nanosecond) - cpu}"
puts "run_delay_ns=#{run_delay_ns - delay}"
puts "wall_ns=#{Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - wall}"
