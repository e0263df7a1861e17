// Naps.java: a JVM whose main thread sleeps N times 20 ms in nap() (argv[0]),
// for the off-CPU stacks of interpreted Java code. Prints pid= first, then
// naps= when done.
public class Naps {
    static void nap() throws InterruptedException {
        Thread.sleep(20);
    }

    public static void main(String[] args) throws InterruptedException {
        System.out.println("pid=" + ProcessHandle.current().pid());
        int n = Integer.parseInt(args[0]);
        for (int i = 0; i < n; i++) nap();
        System.out.println("naps=" + n);
    }
}
