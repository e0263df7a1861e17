// Hot.java: a JVM workload with a known split of its own CPU time. `main`
// calls hotThree and hotOne, three parts to one by design (each call's
// length at random around it), and times each
// call with the thread's own CPU clock (ThreadMXBean, CLOCK_THREAD_CPUTIME_ID);
// prints pid= first; three_ns=, one_ns=, thread_names= (a|b|…) at the end.
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

public class Hot {
    static volatile long sink;

    static long hotThree(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) s = s * 6364136223846793005L + i;
        return s;
    }

    static long hotOne(int n) {
        long s = 1;
        for (int i = 0; i < n; i++) s = s * 2862933555777941757L + i;
        return s;
    }

    public static void main(String[] args) {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        System.out.println("pid=" + ProcessHandle.current().pid());
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 2;
        long end = mx.getCurrentThreadCpuTime() + (long) (seconds * 1e9);
        long three = 0, one = 0;
        // Each call's length drawn at random (three to one on average): a
        // loop of calls of fixed length is periodic, and sampled at a fixed
        // rate it aliases (quarter-second shares of 0.67-0.90 around 0.75 in
        // one run, 0.69 over 2 s in another), which no profiler's sampling
        // can average away.
        long seed = System.nanoTime() | 1;
        while (mx.getCurrentThreadCpuTime() < end) {
            seed ^= seed << 13;
            seed ^= seed >>> 7;
            seed ^= seed << 17;
            int lengthThree = 150000 + (int) Long.remainderUnsigned(seed, 300001);
            int lengthOne = 50000 + (int) Long.remainderUnsigned(seed >>> 20, 100001);
            long a = mx.getCurrentThreadCpuTime();
            sink += hotThree(lengthThree);
            long b = mx.getCurrentThreadCpuTime();
            sink += hotOne(lengthOne);
            long c = mx.getCurrentThreadCpuTime();
            three += b - a;
            one += c - b;
        }
        System.out.println("three_ns=" + three);
        System.out.println("one_ns=" + one);
        StringBuilder names = new StringBuilder();
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (names.length() > 0) names.append('|');
            names.append(t.getName());
        }
        System.out.println("thread_names=" + names);
    }
}
