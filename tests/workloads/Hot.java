// Hot.java: a JVM workload with a known split of its own CPU time. `main`
// calls hotThree and hotOne, three parts to one by design, and times each
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
        while (mx.getCurrentThreadCpuTime() < end) {
            long a = mx.getCurrentThreadCpuTime();
            sink += hotThree(300000);
            long b = mx.getCurrentThreadCpuTime();
            sink += hotOne(100000);
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
