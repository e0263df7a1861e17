// Work.java: fixed JVM work for the bench (`cargo xtask bench`): ROUNDS
// calls of a method 8 Java calls deep around an arithmetic loop, compiled
// by the JIT after the first rounds, so most samples are in compiled Java
// code. Prints elapsed_ms=N (System.nanoTime around the work), as the C
// workloads do: the JVM's slowdown under a profiler, and the BPF time per
// sample in a JVM, come from it.
public class Work {
    static long leaf(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) s = s * 6364136223846793005L + i;
        return s;
    }

    static long nest(int depth, int n) {
        return depth == 0 ? leaf(n) : nest(depth - 1, n) + 1;
    }

    public static void main(String[] args) {
        int rounds = Integer.parseInt(args[0]);
        long start = System.nanoTime();
        long total = 0;
        for (int r = 0; r < rounds; r++) total += nest(8, 100_000);
        long elapsed = System.nanoTime() - start;
        System.out.println("check=" + (total & 7));
        System.out.printf("elapsed_ms=%.3f%n", elapsed / 1e6);
    }
}
