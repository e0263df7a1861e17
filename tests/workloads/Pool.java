// Pool.java: three kinds of work in a thread pool, each task timed by its
// own thread's CPU clock (ThreadMXBean: CLOCK_THREAD_CPUTIME_ID), so a
// profiler's split of the pool's samples between the kinds can be checked
// against what the threads measured. The work is the JDK's own code:
// java.util.regex matching, streams (boxing, filtering, grouping), and
// sorting objects with a comparator chain -- code nobody here wrote,
// compiled, inlined and deoptimized by the JIT as it runs.
//
// Usage: java Pool CPU_MS   (total CPU of the pool's tasks, all threads)
// Prints pid=, then regex=, stream= and sort= (ns of thread CPU per kind),
// a line each.

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

public class Pool {
    static final ThreadMXBean CLOCKS = ManagementFactory.getThreadMXBean();
    static final AtomicLong REGEX = new AtomicLong(), STREAM = new AtomicLong(), SORT = new AtomicLong();
    static final Pattern WORD = Pattern.compile("([a-z]+)-(\\d{2,4})(?:\\.([a-z]{1,3}))?");
    static volatile long sink;

    static String[] lines() {
        String[] out = new String[400];
        for (int i = 0; i < out.length; i++) {
            out[i] = "item-" + (i * 37 % 9000) + " name-" + i + ".txt other-" + (i % 97) + " x";
        }
        return out;
    }

    static long regexTask(String[] lines) {
        long n = 0;
        for (String l : lines) {
            Matcher m = WORD.matcher(l);
            while (m.find()) {
                n += m.group(1).length() + (m.group(3) == null ? 0 : 1);
            }
        }
        return n;
    }

    static long streamTask(int seed) {
        Map<Integer, Long> groups = IntStream.range(0, 6000)
                .map(i -> (i * 7919 + seed) % 10007)
                .filter(i -> i % 3 != 0)
                .boxed()
                .collect(Collectors.groupingBy(i -> i % 16, Collectors.counting()));
        return groups.values().stream().mapToLong(Long::longValue).sum();
    }

    record Entry(String name, int size, long stamp) {}

    static long sortTask(int seed) {
        List<Entry> entries = new ArrayList<>(3000);
        for (int i = 0; i < 3000; i++) {
            int k = (int) Math.floorMod(i * 2654435761L + seed, 100000L);
            entries.add(new Entry("e" + (k % 500), k % 977, k));
        }
        entries.sort(Comparator.comparing(Entry::name).thenComparingInt(Entry::size).thenComparingLong(Entry::stamp));
        Entry[] copy = entries.toArray(new Entry[0]);
        Arrays.sort(copy, Comparator.comparingLong(Entry::stamp).reversed());
        return copy[0].stamp() + entries.get(0).size();
    }

    static void timed(AtomicLong total, Runnable work) {
        long t = CLOCKS.getCurrentThreadCpuTime();
        work.run();
        total.addAndGet(CLOCKS.getCurrentThreadCpuTime() - t);
    }

    public static void main(String[] args) throws Exception {
        long budget = Long.parseLong(args.length > 0 ? args[0] : "4000") * 1_000_000L;
        System.out.println("pid=" + ProcessHandle.current().pid());
        System.out.flush();
        String[] lines = lines();
        ExecutorService pool = Executors.newFixedThreadPool(2);
        List<java.util.concurrent.Future<?>> pending = new ArrayList<>();
        int round = 0;
        while (REGEX.get() + STREAM.get() + SORT.get() < budget) {
            final int seed = round++;
            // Unequal kinds: two regex tasks, one stream task, one sort task a round.
            pending.add(pool.submit(() -> timed(REGEX, () -> sink += regexTask(lines))));
            pending.add(pool.submit(() -> timed(STREAM, () -> sink += streamTask(seed))));
            pending.add(pool.submit(() -> timed(REGEX, () -> sink += regexTask(lines))));
            pending.add(pool.submit(() -> timed(SORT, () -> sink += sortTask(seed))));
            for (java.util.concurrent.Future<?> f : pending) {
                f.get();
            }
            pending.clear();
        }
        pool.shutdown();
        pool.awaitTermination(10, TimeUnit.SECONDS);
        System.out.println("regex=" + REGEX.get());
        System.out.println("stream=" + STREAM.get());
        System.out.println("sort=" + SORT.get());
    }
}
